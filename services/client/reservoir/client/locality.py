"""Where a path's cached bytes are: per host, zone and region (`Client.locality`), the
answer schedulers, the admission webhook and samplers place work by."""

from __future__ import annotations

from dataclasses import dataclass, field

from reservoir.v1 import master_pb2


@dataclass(frozen=True, slots=True)
class HostBytes:
    host: str
    zone: str
    region: str
    bytes: int


@dataclass(frozen=True, slots=True)
class Locality:
    """Bytes of `path` and how many of them are cached on each host (a block held on
    two workers of one host counts once there), zone and region; most bytes first."""

    path: str
    files: int = 0
    bytes: int = 0
    cached_bytes: int = 0
    hosts: tuple[HostBytes, ...] = ()
    zones: dict[str, int] = field(default_factory=dict)
    regions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_proto(cls, msg: master_pb2.LocalityResponse) -> Locality:
        return cls(
            msg.path,
            msg.files,
            msg.bytes,
            msg.cached_bytes,
            tuple(HostBytes(h.host, h.zone, h.region, h.bytes) for h in msg.hosts),
            {z.name: z.bytes for z in msg.zones},
            {r.name: r.bytes for r in msg.regions},
        )

    @property
    def cached_fraction(self) -> float:
        """Cached bytes of all bytes, 0.0 to 1.0 (an empty path counts as all cached)."""
        return self.cached_bytes / self.bytes if self.bytes else 1.0

    def host_bytes(self, host: str) -> int:
        return next((h.bytes for h in self.hosts if h.host == host), 0)

    def host_fraction(self, host: str) -> float:
        """The share of all the path's bytes a job on `host` reads from its own host."""
        return self.host_bytes(host) / self.bytes if self.bytes else 0.0
