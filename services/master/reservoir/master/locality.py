"""Bytes of a path cached per host, zone and region: what schedulers place jobs by.

A pure tally over the block-location table (in memory) and the files below the path (a
page at a time, as `NamespaceReads.report` walks them): no worker is asked anything. A
block held by several workers of one host counts once for that host, and likewise for a
zone or a region, so each place's bytes are bytes a job there can read without leaving it.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol


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


_NONE: frozenset[int] = frozenset()


class HeldBlocks(Protocol):
    """What the tally reads of the location table (locations.BlockLocationTable)."""

    @property
    def holding(self) -> Mapping[str, AbstractSet[str]]: ...

    def blocks_of(self, worker_id: str) -> Mapping[str, AbstractSet[int]]: ...

    def blocks_held(self, file_id: str) -> int: ...


class LocalityTally:
    """Adds up pages of (size, block size, file_id) into bytes per place.

    The work is per file and per worker holding it, not per block: a worker's blocks of
    a file are a set whose size is their count, and a place where several workers hold
    blocks of one file counts the union of their sets (in C, not in a Python loop)."""

    def __init__(self, places: Mapping[str, Place], table: HeldBlocks) -> None:
        self._places = places
        self._table = table
        self.files = 0
        self.bytes = 0
        self.cached_bytes = 0
        # Bytes of files only one worker holds, by worker: placed once, in `result`.
        self._alone: dict[str, int] = {}
        # Bytes of small files several workers hold, by the set of them.
        self._shared: dict[frozenset[str], int] = {}
        self._blocks_of: dict[str, Mapping[str, AbstractSet[int]]] = {}
        self._hosts: dict[str, int] = {}
        self._zones: dict[str, int] = {}
        self._regions: dict[str, int] = {}

    def add(self, files: list[tuple[int, int, str]]) -> None:
        places, workers_of = self._places, self._table.holding.get
        hosts, zones, regions, alone = self._hosts, self._zones, self._regions, self._alone
        blocks_of, shared = self._blocks_of, self._shared
        # Each worker's own mapping, looked up once a page: between pages the table may
        # have forgotten a worker and begun it again.
        blocks_of.clear()
        for size, block_size, file_id in files:
            self.files += 1
            self.bytes += size
            holders = workers_of(file_id) if file_id else None
            if not holders:
                continue
            if size <= block_size:
                # A small file: one block, and whoever holds any block of it holds that
                # one (a file id fixes the size, so no index lies past its end). Summed
                # by holder set, placed once per set in `result`: no sets built here.
                self.cached_bytes += size
                if len(holders) == 1:
                    for worker in holders:
                        alone[worker] = alone.get(worker, 0) + size
                else:
                    key = frozenset(holders)
                    shared[key] = shared.get(key, 0) + size
                continue
            blocks = -(-size // block_size)
            short = blocks * block_size - size  # what the last block lacks of a whole one
            if len(holders) == 1:
                for worker in holders:
                    held_by = blocks_of.get(worker)
                    if held_by is None:
                        held_by = blocks_of[worker] = self._table.blocks_of(worker)
                    held = held_by.get(file_id, _NONE)
                length = _held_bytes([held], blocks, block_size, short)
                self.cached_bytes += length
                alone[worker] = alone.get(worker, 0) + length
                continue
            held_sets = []
            for worker in holders:
                held_by = blocks_of.get(worker)
                if held_by is None:
                    held_by = blocks_of[worker] = self._table.blocks_of(worker)
                held_sets.append((worker, held_by.get(file_id, _NONE)))
            if sum(len(s) for _, s in held_sets) == self._table.blocks_held(file_id):
                # No block of it is held twice (one replica, spread over workers): each
                # worker's bytes are its own, and a place's are the sum of its workers'.
                # (A file id fixes the size: no index lies past the end.)
                last = blocks - 1
                for worker, held in held_sets:
                    length = len(held) * block_size
                    if short and last in held:
                        length -= short
                    self.cached_bytes += length
                    alone[worker] = alone.get(worker, 0) + length
                continue
            every: list[AbstractSet[int]] = []
            by_host: dict[str, list[AbstractSet[int]]] = {}
            by_zone: dict[str, list[AbstractSet[int]]] = {}
            by_region: dict[str, list[AbstractSet[int]]] = {}
            for worker, held in held_sets:
                every.append(held)
                place = places.get(worker)
                if place is not None:
                    by_host.setdefault(place.host, []).append(held)
                    by_zone.setdefault(place.zone, []).append(held)
                    by_region.setdefault(place.region, []).append(held)
            self.cached_bytes += _held_bytes(every, blocks, block_size, short)
            for groups, totals in ((by_host, hosts), (by_zone, zones), (by_region, regions)):
                for name, sets in groups.items():
                    totals[name] = totals.get(name, 0) + _held_bytes(
                        sets, blocks, block_size, short
                    )

    def result(self, path: str) -> PathLocality:
        for worker, length in self._alone.items():
            place = self._places.get(worker)
            if place is not None:
                self._hosts[place.host] = self._hosts.get(place.host, 0) + length
                self._zones[place.zone] = self._zones.get(place.zone, 0) + length
                self._regions[place.region] = self._regions.get(place.region, 0) + length
        self._alone.clear()
        for holders, length in self._shared.items():
            known = [p for p in map(self._places.get, holders) if p is not None]
            for totals, names in (
                (self._hosts, {p.host for p in known}),
                (self._zones, {p.zone for p in known}),
                (self._regions, {p.region for p in known}),
            ):
                for name in names:
                    totals[name] = totals.get(name, 0) + length
        self._shared.clear()
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


def _held_bytes(sets: list[AbstractSet[int]], blocks: int, block_size: int, short: int) -> int:
    """Bytes of the blocks in the union of `sets`, each counted once; an index past the
    file's end (a longer old version's, under the same id) counts nothing."""
    held = sets[0] if len(sets) == 1 else set().union(*sets)
    if held and max(held) >= blocks:
        held = {i for i in held if i < blocks}
    length = len(held) * block_size
    return length - short if short and (blocks - 1) in held else length
