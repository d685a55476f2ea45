"""Bytes of a path cached per host, zone and region: what schedulers place jobs by.

A pure tally over the block-location table (in memory) and the files below the path (a
page at a time, as `NamespaceReads.report` walks them): no worker is asked anything. A
block held by several workers of one host counts once for that host, and likewise for a
zone or a region, so each place's bytes are bytes a job there can read without leaving it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Place:
    """Where a worker runs."""

    host: str
    zone: str = ""
    region: str = ""


@dataclass(frozen=True, slots=True)
class HostShare:
    host: str
    zone: str
    region: str
    bytes: int


@dataclass(frozen=True, slots=True)
class PathLocality:
    path: str
    files: int
    bytes: int
    cached_bytes: int
    hosts: list[HostShare] = field(default_factory=list)  # most bytes first
    zones: dict[str, int] = field(default_factory=dict)
    regions: dict[str, int] = field(default_factory=dict)


HoldersOf = Callable[[str], Mapping[int, set[str]] | None]


class LocalityTally:
    """Adds up pages of (size, block size, file_id) into bytes per place."""

    def __init__(self, places: Mapping[str, Place], holders_of: HoldersOf) -> None:
        self._places = places
        self._holders_of = holders_of
        self.files = 0
        self.bytes = 0
        self.cached_bytes = 0
        self._hosts: dict[str, int] = {}
        self._zones: dict[str, int] = {}
        self._regions: dict[str, int] = {}

    def add(self, files: list[tuple[int, int, str]]) -> None:
        places, holders_of = self._places, self._holders_of
        hosts, zones, regions = self._hosts, self._zones, self._regions
        for size, block_size, file_id in files:
            self.files += 1
            self.bytes += size
            held = holders_of(file_id) if file_id else None
            if not held:
                continue
            blocks = -(-size // block_size)
            for index, holders in held.items():
                if index >= blocks or not holders:
                    continue
                length = min(block_size, size - index * block_size)
                self.cached_bytes += length
                if len(holders) == 1:
                    # The common case (one replica): no sets to build.
                    place = places.get(next(iter(holders)))
                    if place is not None:
                        hosts[place.host] = hosts.get(place.host, 0) + length
                        zones[place.zone] = zones.get(place.zone, 0) + length
                        regions[place.region] = regions.get(place.region, 0) + length
                    continue
                known = [p for p in map(places.get, holders) if p is not None]
                for host in {p.host for p in known}:
                    hosts[host] = hosts.get(host, 0) + length
                for zone in {p.zone for p in known}:
                    zones[zone] = zones.get(zone, 0) + length
                for region in {p.region for p in known}:
                    regions[region] = regions.get(region, 0) + length

    def result(self, path: str) -> PathLocality:
        # A host's zone and region: those of its workers (one host has one of each).
        labels = {p.host: p for p in self._places.values()}
        hosts = [
            HostShare(host, labels[host].zone, labels[host].region, count)
            for host, count in self._hosts.items()
        ]
        hosts.sort(key=lambda h: (-h.bytes, h.host))
        return PathLocality(
            path,
            self.files,
            self.bytes,
            self.cached_bytes,
            hosts,
            _most_first(self._zones),
            _most_first(self._regions),
        )


def _most_first(counts: dict[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
