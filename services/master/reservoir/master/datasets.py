"""Declared datasets as etcd keeps them: each one's spec (with a generation that counts the
applies that changed it) and, under its own key, the status the leader's reconciler writes.

`apply` of the same spec again changes nothing (the generation stays: nothing to do);
a changed spec bumps the generation, and the reconciler changes only what changed."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from reservoir.common import logs, paths
from reservoir.common.dataset_spec import DatasetSpec, parse_dataset
from reservoir.common.errors import AlreadyExists, InvalidArgument, NotFound
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import MetadataStore
from reservoir.common.models import Mount

log = logs.get_logger(__name__)

# The phases a dataset goes through (DatasetStatus.phase).
PENDING, READY, PRELOADING, FAILED, DELETING = (
    "Pending",
    "Ready",
    "Preloading",
    "Failed",
    "Deleting",
)
MAX_RUNS = 20  # preload runs kept in a status


@dataclass
class DatasetRecord:
    spec: DatasetSpec
    generation: int = 1
    created_ms: int = 0
    updated_ms: int = 0
    deleting: bool = False
    keep_cache: bool = False

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "spec": json.loads(self.spec.to_json()),
                "generation": self.generation,
                "created_ms": self.created_ms,
                "updated_ms": self.updated_ms,
                "deleting": self.deleting,
                "keep_cache": self.keep_cache,
            }
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> DatasetRecord:
        d = json.loads(raw)
        return cls(
            spec=DatasetSpec.from_json(json.dumps(d["spec"])),
            generation=d["generation"],
            created_ms=d["created_ms"],
            updated_ms=d["updated_ms"],
            deleting=d["deleting"],
            keep_cache=d["keep_cache"],
        )


@dataclass
class Condition:
    type: str  # Mounted, Synced, Preloaded, Pinned
    status: bool
    reason: str = ""
    message: str = ""
    changed_ms: int = 0


@dataclass
class PreloadRun:
    job: str
    trigger: str  # once, cron, change
    started_ms: int
    state: str = "running"
    done_bytes: int = 0
    total_bytes: int = 0


@dataclass
class DatasetStatus:
    phase: str = PENDING
    observed_generation: int = 0
    mounted_uri: str = ""
    last_sync_ms: int = 0
    synced_generation: int = 0
    files: int = 0
    total_bytes: int = 0
    cached_bytes: int = 0
    quota_bytes: int = 0
    pinned: bool = False
    # What the last preload policy did: the generation a Once run was for, when Cron ran
    # last (or was last due), and the sync count an OnChange run caught up with.
    preloaded_generation: int = 0
    cron_last_ms: int = 0
    # Interval syncs that found changes, and how many of them OnChange preloaded; the
    # files the last of them found new or changed (empty: too many to name, load all).
    changes_seen: int = 0
    preloaded_changes: int = 0
    changed_paths: list[str] = field(default_factory=list)
    runs: list[PreloadRun] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)

    @property
    def cached_percent(self) -> float:
        return 100.0 * self.cached_bytes / self.total_bytes if self.total_bytes else 100.0

    def running(self) -> PreloadRun | None:
        return next((r for r in self.runs if r.state in ("pending", "running")), None)

    def condition(self, type_: str, status: bool, reason: str = "", message: str = "") -> None:
        """Sets a condition; its time changes only when its status or reason does."""
        now = int(time.time() * 1000)
        for c in self.conditions:
            if c.type == type_:
                if (c.status, c.reason) != (status, reason):
                    c.changed_ms = now
                c.status, c.reason, c.message = status, reason, message
                return
        self.conditions.append(Condition(type_, status, reason, message, now))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cached_percent"] = round(self.cached_percent, 2)
        return d

    @classmethod
    def from_json(cls, raw: bytes) -> DatasetStatus:
        d = json.loads(raw)
        d.pop("cached_percent", None)
        d["runs"] = [PreloadRun(**r) for r in d.get("runs", [])]
        d["conditions"] = [Condition(**c) for c in d.get("conditions", [])]
        return cls(**d)


class DatasetTable:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    @staticmethod
    def _key(name: str) -> bytes:
        return keyspace.DATASETS + name.encode()

    @staticmethod
    def _status_key(name: str) -> bytes:
        return keyspace.DATASET_STATUS + name.encode()

    async def apply(self, document: Any, mounts: list[Mount]) -> DatasetRecord:
        """Stores the dataset `document` declares. Its path may be free, its own mount, or
        a mount made by hand of the same URI (adopted, its namespace and cache kept)."""
        spec = parse_dataset(document)
        for mount in mounts:
            if mount.path != spec.path and (
                paths.is_within(mount.path, spec.path) or paths.is_within(spec.path, mount.path)
            ):
                raise InvalidArgument(f"spec.path: {spec.path} overlaps the mount at {mount.path}")
            if mount.path != spec.path or mount.options.dataset == spec.name:
                continue
            if mount.options.dataset:
                raise AlreadyExists(f"{spec.path} is dataset {mount.options.dataset}'s")
            if mount.uri.rstrip("/") != spec.source.uri.rstrip("/"):
                raise AlreadyExists(
                    f"{spec.path} is mounted by hand from {mount.uri}: unmount it first"
                )
        now = int(time.time() * 1000)
        old = await self.get(spec.name, missing_ok=True)
        if old is not None and old.deleting:
            raise InvalidArgument(f"dataset {spec.name} is being deleted; apply it once it is gone")
        if old is not None and old.spec.path != spec.path:
            raise InvalidArgument(
                f"spec.path: dataset {spec.name} lives at {old.spec.path}; a dataset does not "
                "move (delete it and apply it under the new path)"
            )
        if old is not None and old.spec == spec:
            return old
        record = DatasetRecord(
            spec=spec,
            generation=(old.generation + 1) if old else 1,
            created_ms=old.created_ms if old else now,
            updated_ms=now,
        )
        await self._store.put(self._key(spec.name), record.to_json())
        log.info("dataset_applied", dataset=spec.name, generation=record.generation)
        return record

    async def get(self, name: str, missing_ok: bool = False) -> DatasetRecord | None:
        raw = await self._store.get(self._key(name))
        if raw is None:
            if missing_ok:
                return None
            raise NotFound(f"no dataset {name!r} (see `reservoir datasets`)")
        return DatasetRecord.from_json(raw)

    async def all(self) -> list[DatasetRecord]:
        pairs = await self._store.get_prefix(keyspace.DATASETS)
        return sorted((DatasetRecord.from_json(v) for _, v in pairs), key=lambda r: r.spec.name)

    async def mark_deleting(self, name: str, keep_cache: bool) -> DatasetRecord:
        record = await self.get(name)
        assert record is not None
        record.deleting, record.keep_cache = True, keep_cache
        record.updated_ms = int(time.time() * 1000)
        await self._store.put(self._key(name), record.to_json())
        return record

    async def forget(self, name: str) -> None:
        await self._store.delete_many([self._key(name), self._status_key(name)])

    async def status(self, name: str) -> DatasetStatus:
        raw = await self._store.get(self._status_key(name))
        return DatasetStatus() if raw is None else DatasetStatus.from_json(raw)

    async def save_status(self, name: str, status: DatasetStatus) -> None:
        await self._store.put(self._status_key(name), json.dumps(status.to_dict()).encode())
