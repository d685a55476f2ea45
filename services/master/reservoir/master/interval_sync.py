"""The leader's proactive metadata sync: a mount with `metadata_sync: interval:<d>` has
its whole tree listed every interval and the namespace made to agree with it.

A reader's miss already re-lists a stale directory (metadata_sync.py), but only the
directory it reads, only when it reads, and a deleted file it has cached stays until it
looks again. Here the leader walks the tree with the metadata load's own code (TreeLoad:
listing pages compared with the stored inodes, only what changed written, what vanished
removed), so an object added, changed or deleted shows in `ls`/`open` within the interval
(plus a client's file-info TTL) whoever reads.

What was found changed since the last pass (by this pass, or by a reader's listing, a
HEAD, a metadata load or an S3 event in between: found_changes.py) is one small record
per mount in etcd (`SyncRecord`, bounded by `sync_found_max` paths): any master can read
it for a dataset's status, a new leader continues the schedule from it, and a preload of
what changed takes its `found` paths.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field

from reservoir.common import logs
from reservoir.common.errors import ReservoirError
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import MetadataStore
from reservoir.common.models import Mount

from .found_changes import FoundChanges
from .metadata_sync import now_ms
from .mount_table import MountTable
from .tree_load import KeysOutOfOrder, TreeLoad

log = logs.get_logger(__name__)


@dataclass(frozen=True)
class SyncRecord:
    """What the last interval sync of one mount found."""

    mount_path: str
    # The mount it was made for: a remount starts a new schedule (and a new baseline).
    mount_created_ms: int
    started_ms: int
    finished_ms: int = 0
    listed: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0  # entries removed (a vanished directory counts once, with its subtree)
    # New or changed files, the first `sync_found_max`; `more_found` when there were more.
    found: list[str] = field(default_factory=list)
    more_found: bool = False
    # The first pass of a mount: everything it found is "added", which is the load of the
    # mount's metadata, not a change in the under-store.
    baseline: bool = False
    error: str = ""  # why the pass failed (its counts are what it did before that)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> SyncRecord:
        return cls(**json.loads(raw))


class SyncRecords:
    """The per-mount sync records in the metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def get(self, mount_path: str) -> SyncRecord | None:
        raw = await self._store.get(keyspace.mount_sync_key(mount_path))
        return SyncRecord.from_json(raw) if raw is not None else None

    async def put(self, record: SyncRecord) -> None:
        await self._store.put(keyspace.mount_sync_key(record.mount_path), record.to_json())

    async def remove(self, mount_path: str) -> None:
        await self._store.delete(keyspace.mount_sync_key(mount_path))


class IntervalSync:
    """Runs the due mounts' syncs, one mount at a time, each time the leader ticks."""

    def __init__(
        self,
        mounts: MountTable,
        tree_load: TreeLoad,
        found: FoundChanges,
        records: SyncRecords,
        at_once: int = 2,
    ) -> None:
        self._mounts = mounts
        self._at_once = max(1, at_once)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._tree_load = tree_load
        self._found = found
        self.records = records
        # The last record of each mount this leader has seen: read from etcd once.
        self._last: dict[str, SyncRecord] = {}

    async def last_sync(self, mount_path: str) -> SyncRecord | None:
        """What the last sync of `mount_path` found (None: none has run)."""
        record = self._last.get(mount_path)
        return record if record is not None else await self.records.get(mount_path)

    def restart(self) -> None:
        """Forgets what it knew (a leader again: another may have synced meanwhile)."""
        self._last.clear()

    async def stop(self) -> None:
        """Stops the passes under way (no longer the leader); their mounts are synced
        again by the next leader, as their records say."""
        running, self._running = self._running, {}
        for task in running.values():
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)

    async def wait(self) -> None:
        """Returns when the passes under way have ended."""
        await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def forget(self, mount_path: str) -> None:
        """The mount is gone (unmounted, or replaced): so is what was found there."""
        self._last.pop(mount_path, None)
        self._found.forget(mount_path)
        await self.records.remove(mount_path)

    async def tick(self) -> None:
        """Starts a pass for each due mount, up to `sync_mounts_at_once` at a time, so a
        mount of millions does not hold back another's interval."""
        self._running = {p: t for p, t in self._running.items() if not t.done()}
        for mount in self._mounts.mounts():
            if len(self._running) >= self._at_once:
                return
            interval = mount.options.sync_interval_ms()
            if interval is None or mount.path in self._running:
                continue
            last = await self._record_of(mount)
            # The first pass is an interval after the mount, not at once: a mount of
            # millions is not walked whole the moment it is made (its readers' misses
            # list what they need meanwhile).
            since = last.started_ms if last is not None else mount.created_ms
            if now_ms() - since < interval:
                continue
            self._running[mount.path] = asyncio.create_task(
                self._pass(mount, baseline=last is None), name=f"sync:{mount.path}"
            )

    async def _pass(self, mount: Mount, *, baseline: bool) -> None:
        try:
            await self.sync_mount(mount, baseline=baseline)
        except ReservoirError as exc:  # the record could not be stored: tried next tick
            log.warning("interval_sync_not_recorded", path=mount.path, error=str(exc))

    async def _record_of(self, mount: Mount) -> SyncRecord | None:
        """The mount's last record, unless it was made for an earlier mount at its path."""
        record = self._last.get(mount.path)
        if record is None:
            record = await self.records.get(mount.path)
            if record is not None:
                self._last[mount.path] = record
        if record is None or record.mount_created_ms != mount.created_ms:
            return None
        return record

    async def sync_mount(self, mount: Mount, *, baseline: bool = False) -> SyncRecord:
        """One pass over `mount`'s tree; its record is stored and returned, failed or not.
        The record counts every change found since the last one, whether this pass found
        it or a reader's listing, a HEAD or an event did in between."""
        started_ms = now_ms()
        started = time.perf_counter()
        listed = 0
        error = ""
        try:
            async for counts in self._tree_load.run(mount, mount.path):
                listed = counts.listed
        except (ReservoirError, KeysOutOfOrder) as exc:
            error = str(exc)
        found = self._found.drain(mount.path)
        record = SyncRecord(
            mount_path=mount.path,
            mount_created_ms=mount.created_ms,
            started_ms=started_ms,
            finished_ms=now_ms(),
            listed=listed,
            added=found.added,
            changed=found.changed,
            removed=found.removed,
            found=found.paths,
            more_found=found.more,
            baseline=baseline,
            error=error,
        )
        self._last[mount.path] = record
        await self.records.put(record)
        fields = {
            "path": mount.path,
            "listed": listed,
            "added": found.added,
            "changed": found.changed,
            "removed": found.removed,
            "seconds": round(time.perf_counter() - started, 3),
        }
        if error:
            log.warning("interval_sync_failed", error=error, **fields)
        elif found.added or found.changed or found.removed:
            log.info("interval_sync_found_changes", baseline=baseline, **fields)
        else:
            log.debug("interval_sync_unchanged", **fields)
        return record
