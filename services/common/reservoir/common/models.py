"""Domain objects shared by master, worker and client, and their protobuf/JSON forms."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from urllib.parse import urlsplit

from reservoir.common.config import MiB, parse_duration
from reservoir.common.errors import InvalidArgument
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.v1 import common_pb2, master_pb2, worker_pb2

DEFAULT_BLOCK_SIZE = 4 * MiB
NO_METADATA = ObjectMetadata()
MIN_BLOCK_SIZE = 4096
MAX_BLOCK_SIZE = 256 * MiB
NORMAL = "normal"
PRIORITIES = ("low", NORMAL, "high")  # a mount's eviction priority, evicted first first


def file_id_for(ufs_uri: str, etag: str, size: int, block_size: int) -> str:
    """Content and layout identity: a changed object (new ETag or size) gets a new id, and
    so does the same object cut into blocks of another size, so a block id
    (file_id, index) always names one byte range of one version of one object."""
    digest = hashlib.blake2b(
        f"{ufs_uri}\x00{etag}\x00{size}\x00{block_size}".encode(), digest_size=16
    )
    return digest.hexdigest()


def check_queue_url(url: str) -> None:
    """Refuses what cannot be an SQS queue URL (http(s)://host/account/queue-name)."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    if parts.scheme not in ("http", "https") or not parts.netloc or len(segments) != 2:
        raise InvalidArgument(
            "events_queue_url must be an SQS queue URL, "
            "https://sqs.<region>.amazonaws.com/<account>/<queue>"
        )


@dataclass(frozen=True, slots=True)
class MountOptions:
    endpoint_url: str = ""
    region: str = ""
    block_size: int = 0
    credentials: str = ""
    metadata_ttl_ms: int = 0
    metadata_sync: str = ""
    # Writes, renames and removals through Reservoir are allowed (checkpoints); read-only
    # unless mounted with it.
    writable: bool = False
    # An SQS queue of the bucket's S3 event notifications, which the leader applies as
    # they arrive (master/event_queue.py): changes seen in seconds, not at the interval.
    events_queue_url: str = ""
    # The Dataset this mount is (master/datasets.py); empty for a mount made by hand.
    dataset: str = ""
    # The most bytes of this mount's blocks the whole cluster keeps (0: no cap). Each
    # worker keeps within its share (capacity-weighted, see worker/mount_shares.py).
    quota_bytes: int = 0
    # Which mount's blocks go first when a worker must evict: low, then normal, then high
    # (after any mount over its share). Empty is normal.
    priority: str = ""
    # A mount not read for this long has its blocks reclaimed (0: never).
    idle_ttl_ms: int = 0
    # Cluster-wide under-store budgets (all workers together); 0 = unlimited.
    max_requests_per_s: int = 0
    max_bytes_per_s: int = 0
    max_in_flight: int = 0

    @classmethod
    def from_proto(cls, o: common_pb2.MountOptions) -> MountOptions:
        return cls(
            o.endpoint_url,
            o.region,
            o.block_size,
            o.credentials,
            o.metadata_ttl_ms,
            o.metadata_sync,
            o.writable,
            max_requests_per_s=o.max_requests_per_s,
            max_bytes_per_s=o.max_bytes_per_s,
            max_in_flight=o.max_in_flight,
            quota_bytes=o.quota_bytes,
            priority=o.priority,
            idle_ttl_ms=o.idle_ttl_ms,
            events_queue_url=o.events_queue_url,
            dataset=o.dataset,
        )

    def same_store(self, other: MountOptions) -> bool:
        """Whether `other` reads the same objects the same way (endpoint, region,
        credentials, block geometry): a change of anything else is a change of policy,
        made without dropping the mount's namespace or cache."""
        return (self.endpoint_url, self.region, self.credentials, self.block_size) == (
            other.endpoint_url,
            other.region,
            other.credentials,
            other.block_size,
        )

    def sync_interval_ms(self) -> int | None:
        """How often the leader lists the mount's whole tree and applies what changed
        (master/interval_sync.py): only when the mount says `interval:<d>` (a positive
        duration); None otherwise."""
        if not self.metadata_sync.startswith("interval:"):
            return None
        interval = int(parse_duration(self.metadata_sync[len("interval:") :]) * 1000)
        return interval if interval > 0 else None

    @property
    def priority_rank(self) -> int:
        """0 for low, 1 for normal, 2 for high: lower ranks are evicted first."""
        return PRIORITIES.index(self.priority or NORMAL)

    @property
    def budgeted(self) -> bool:
        """Whether any under-store budget limits this mount."""
        return bool(self.max_requests_per_s or self.max_bytes_per_s or self.max_in_flight)

    def sync_ttl_ms(self, default_ms: int) -> int | None:
        """How long the namespace is trusted before it is checked against the
        under-store again; None = never checked again."""
        policy = self.metadata_sync
        if policy == "never":
            return None
        if policy == "always":
            return 0
        if policy.startswith("interval:"):
            return int(parse_duration(policy[len("interval:") :]) * 1000)
        return self.metadata_ttl_ms or default_ms

    def validated(self) -> MountOptions:
        if self.metadata_sync and not (
            self.metadata_sync in ("never", "always") or self.metadata_sync.startswith("interval:")
        ):
            raise InvalidArgument("metadata_sync must be never, always or interval:<duration>")
        self.sync_ttl_ms(0)  # a bad duration fails here, at mount time
        if self.block_size < 0 or (self.block_size and self.block_size < MIN_BLOCK_SIZE):
            raise InvalidArgument(f"block_size must be at least {MIN_BLOCK_SIZE} bytes")
        if self.block_size > MAX_BLOCK_SIZE:
            raise InvalidArgument(f"block_size must be at most {MAX_BLOCK_SIZE // MiB} MiB")
        if self.metadata_ttl_ms < 0:
            raise InvalidArgument("metadata_ttl_ms must not be negative")
        if self.events_queue_url:
            check_queue_url(self.events_queue_url)
        if self.quota_bytes < 0:
            raise InvalidArgument("quota_bytes must not be negative")
        if self.priority and self.priority not in PRIORITIES:
            raise InvalidArgument(f"priority must be one of {', '.join(PRIORITIES)}")
        if self.idle_ttl_ms < 0:
            raise InvalidArgument("idle_ttl_ms must not be negative")
        for name in ("max_requests_per_s", "max_bytes_per_s", "max_in_flight"):
            if getattr(self, name) < 0:
                raise InvalidArgument(f"{name} must not be negative (0 = unlimited)")
        if 0 < self.max_bytes_per_s < MIN_BLOCK_SIZE:
            # Below one smallest block a second no fetch could ever be admitted whole.
            raise InvalidArgument(f"max_bytes_per_s must be at least {MIN_BLOCK_SIZE} (or 0)")
        return self


@dataclass(frozen=True, slots=True)
class Mount:
    path: str
    uri: str
    options: MountOptions = field(default_factory=MountOptions)
    created_ms: int = 0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Mount:
        data = json.loads(raw)
        data["options"] = MountOptions(**data.get("options", {}))
        return cls(**data)

    def to_proto(self) -> common_pb2.MountInfo:
        return common_pb2.MountInfo(
            path=self.path,
            uri=self.uri,
            options=common_pb2.MountOptions(**asdict(self.options)),
            created_ms=self.created_ms,
        )

    @classmethod
    def from_proto(cls, msg: common_pb2.MountInfo) -> Mount:
        return cls(
            path=msg.path,
            uri=msg.uri,
            options=MountOptions.from_proto(msg.options),
            created_ms=msg.created_ms,
        )


@dataclass(frozen=True, slots=True)
class Inode:
    path: str
    is_dir: bool
    size: int = 0
    mtime_ms: int = 0
    etag: str = ""
    block_size: int = DEFAULT_BLOCK_SIZE
    file_id: str = ""
    ufs_uri: str = ""
    mount_path: str = ""
    synced_ms: int = 0  # when the master last checked it against the under-store
    listed_ms: int = 0  # directories: when all their children were last written
    tree_listed_ms: int = 0  # directories: when a recursive metadata load last completed
    # Per block index, the ids of the workers that hold it (filled on request).
    locations: dict[int, list[str]] = field(default_factory=dict)
    # What the file was written with through Reservoir (content type, user metadata).
    metadata: ObjectMetadata = NO_METADATA

    @property
    def block_count(self) -> int:
        if self.is_dir or self.size == 0:
            return 0
        return (self.size + self.block_size - 1) // self.block_size

    def block_length(self, index: int) -> int:
        return min(self.block_size, self.size - index * self.block_size)

    def block_spans(self, offset: int, end: int) -> Iterator[tuple[int, int, int]]:
        """(block index, offset in the block, length) of each block's share of the file's
        bytes [offset, end), in order (`end` at most the size)."""
        for index in range(offset // self.block_size, (end - 1) // self.block_size + 1):
            start = index * self.block_size
            lo = max(offset, start)
            yield index, lo - start, min(end, start + self.block_length(index)) - lo

    def to_json(self) -> bytes:
        data = asdict(self)
        del data["locations"]
        data["metadata"] = self.metadata.to_dict()
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Inode:
        data = json.loads(raw)
        data["metadata"] = ObjectMetadata.from_dict(data.get("metadata") or {})
        return cls(**data)

    def with_locations(self, locations: dict[int, list[str]]) -> Inode:
        return replace(self, locations=locations)

    def to_proto(self) -> common_pb2.FileInfo:
        return common_pb2.FileInfo(
            path=self.path,
            kind=common_pb2.FILE_KIND_DIRECTORY if self.is_dir else common_pb2.FILE_KIND_FILE,
            size=self.size,
            mtime_ms=self.mtime_ms,
            etag=self.etag,
            block_size=self.block_size,
            file_id=self.file_id,
            ufs_uri=self.ufs_uri,
            mount_path=self.mount_path,
            locations=[
                common_pb2.BlockLocation(index=i, worker_ids=ids)
                for i, ids in sorted(self.locations.items())
            ],
            metadata=self.metadata.to_proto() if self.metadata else None,
        )

    @classmethod
    def from_proto(cls, msg: common_pb2.FileInfo) -> Inode:
        return cls(
            path=msg.path,
            is_dir=msg.kind == common_pb2.FILE_KIND_DIRECTORY,
            size=msg.size,
            mtime_ms=msg.mtime_ms,
            etag=msg.etag,
            block_size=msg.block_size,
            file_id=msg.file_id,
            ufs_uri=msg.ufs_uri,
            mount_path=msg.mount_path,
            locations={loc.index: list(loc.worker_ids) for loc in msg.locations},
            metadata=ObjectMetadata.from_proto(msg.metadata)
            if msg.HasField("metadata")
            else NO_METADATA,
        )


# A worker's states (WorkerRecord.state).
SERVING = "serving"
DRAINING = "draining"  # its blocks are being copied to their next homes; it still serves
DRAINED = "drained"  # every block it held has another home: it may stop
WORKER_STATES = (SERVING, DRAINING, DRAINED)


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    id: str
    address: str
    host: str = ""
    zone: str = ""
    capacity_bytes: int = 0
    started_ms: int = 0
    lease_id: int = 0  # the etcd lease its registration (and its block locations) live under
    shm_dir: str = ""  # blocks as files a same-host client may read directly
    data_address: str = ""  # the data port (block_transfer.py); empty: gRPC only
    # SERVING, or DRAINING/DRAINED (an operator's mark, kept apart from the record the
    # worker writes: see WorkerRegistry). Only a serving worker is any block's home.
    state: str = "serving"
    region: str = ""  # a group of zones (topology.kubernetes.io/region)
    # The data port's protection level on a secure cluster (blocks/data_protection.py).
    data_protection: str = ""

    @property
    def serving(self) -> bool:
        return self.state == SERVING

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> WorkerRecord:
        return cls(**json.loads(raw))

    def to_proto(self) -> common_pb2.WorkerInfo:
        return common_pb2.WorkerInfo(
            id=self.id,
            address=self.address,
            host=self.host,
            zone=self.zone,
            capacity_bytes=self.capacity_bytes,
            started_ms=self.started_ms,
            shm_dir=self.shm_dir,
            data_address=self.data_address,
            state=self.state,
            region=self.region,
            data_protection=self.data_protection,
        )

    @classmethod
    def from_proto(cls, msg: common_pb2.WorkerInfo) -> WorkerRecord:
        return cls(
            msg.id,
            msg.address,
            msg.host,
            msg.zone,
            msg.capacity_bytes,
            msg.started_ms,
            shm_dir=msg.shm_dir,
            data_address=msg.data_address,
            state=msg.state or SERVING,
            region=msg.region,
            data_protection=msg.data_protection,
        )


@dataclass(frozen=True, slots=True)
class CacheRule:
    """A pin and/or a TTL on a Reservoir path (see master/cache_rules.py). Workers match
    a block to a TTL rule by the under-store URI its requests carry (`covers`), and know
    a pinned block by its file id (one key per pinned file, written by the master)."""

    path: str
    mount_path: str
    ufs_prefix: str  # the under-store URI `path` maps to
    pinned: bool = False
    pinned_files: int = 0
    pinned_bytes: int = 0
    ttl_ms: int = 0  # 0 = no TTL
    updated_ms: int = 0

    def covers(self, ufs_uri: str) -> bool:
        """Whether an object of this URI lies at or below the rule's path."""
        prefix = self.ufs_prefix
        return ufs_uri == prefix or ufs_uri.startswith(
            prefix if prefix.endswith("/") else prefix + "/"
        )

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CacheRule:
        return cls(**json.loads(raw))

    def to_proto(self) -> master_pb2.CacheRule:
        return master_pb2.CacheRule(**asdict(self))

    @classmethod
    def from_proto(cls, msg: master_pb2.CacheRule) -> CacheRule:
        return cls(
            msg.path,
            msg.mount_path,
            msg.ufs_prefix,
            msg.pinned,
            msg.pinned_files,
            msg.pinned_bytes,
            msg.ttl_ms,
            msg.updated_ms,
        )


def block_request(
    inode: Inode, index: int, offset: int = 0, length: int = -1
) -> worker_pb2.ReadBlockRequest:
    """What a worker needs to serve (or fetch) one block of `inode`."""
    return worker_pb2.ReadBlockRequest(
        file_id=inode.file_id,
        index=index,
        offset=offset,
        length=length,
        ufs_uri=inode.ufs_uri,
        etag=inode.etag,
        file_size=inode.size,
        block_size=inode.block_size,
        mount_path=inode.mount_path,
    )


def shm_block_name(file_id: str, index: int) -> str:
    """The file name of a block in a worker's shared-memory directory."""
    return f"{file_id}-{index}"


@dataclass(frozen=True, slots=True)
class MasterRecord:
    """One master as etcd knows it (master/leadership.py): the leader key holds the
    leader's, and each master keeps its own under its lease."""

    id: str
    address: str
    role: str  # "leader" or "standby"
    since_ms: int
    term: int = 0  # the term it leads (or last led); 0: never led

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> MasterRecord:
        return cls(**json.loads(raw))

    def to_proto(self) -> master_pb2.MasterInfo:
        return master_pb2.MasterInfo(
            id=self.id,
            address=self.address,
            role=self.role,
            since_ms=self.since_ms,
            term=self.term,
        )

    @classmethod
    def from_proto(cls, msg: master_pb2.MasterInfo) -> MasterRecord:
        return cls(msg.id, msg.address, msg.role, msg.since_ms, msg.term)
