"""The leader keeps each declared dataset as its spec says: mounted with its policies, its
namespace loaded, pinned or not, preloaded by its policy (Once, Cron, OnChange), deleted
when asked; and writes what it found as the dataset's status.

Each pass is idempotent: what is already as the spec says is left alone (an unchanged
dataset costs no call to the under-store). What a pass starts is named so that a second
start is the first one: a preload's load job has an id derived from the dataset, the
generation and the trigger, so a leader that takes over mid-pass and starts it again gets
the job the old leader started, never a second one."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from reservoir.common import logs, paths
from reservoir.common.dataset_spec import DatasetSpec
from reservoir.common.errors import NotFound, ReservoirError
from reservoir.common.models import Mount, MountOptions

from .cron_schedule import latest_due
from .datasets import (
    DELETING,
    FAILED,
    MAX_RUNS,
    PRELOADING,
    READY,
    DatasetRecord,
    DatasetStatus,
    DatasetTable,
    PreloadRun,
)
from .interval_sync import SyncRecord
from .job_records import Job
from .mount_table import MountTable

log = logs.get_logger(__name__)

_ENDED = ("completed", "failed", "cancelled")


class Namespace(Protocol):
    def load_metadata(
        self, path: str, recursive: bool = True
    ) -> AsyncIterator[tuple[int, int, int, bool]]: ...

    async def report(self, path: str) -> dict[str, int]: ...


class Jobs(Protocol):
    async def submit(
        self,
        path: str,
        replicas: int,
        priority_paths: list[str],
        metadata_only: bool,
        files: Sequence[str] = (),
        *,
        request_id: str = "",
    ) -> Job: ...

    async def get(self, job_id: str) -> Job: ...

    async def cancel(self, job_id: str) -> Job: ...


class Pins(Protocol):
    async def pin(self, path: str) -> object: ...

    async def unpin(self, path: str) -> object: ...

    async def free(self, path: str) -> object: ...


class SyncFindings(Protocol):
    """What the mounts' interval syncs found (interval_sync.SyncRecords)."""

    async def get(self, mount_path: str) -> SyncRecord | None: ...


class Mounts(Protocol):
    """The master's mount calls (MasterService)."""

    async def mount(
        self, path: str, uri: str, options: MountOptions, *, replace: bool = False
    ) -> Mount: ...

    async def unmount(self, path: str) -> None: ...


class DatasetReconciler:
    def __init__(
        self,
        table: DatasetTable,
        mount_table: MountTable,
        mounts: Mounts,
        namespace: Namespace,
        jobs: Jobs,
        pins: Pins,
        syncs: SyncFindings,
        status_interval_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`status_interval_s`: how often cached bytes are counted again for the status
        (a walk of the dataset's namespace); `clock`: seconds since the epoch (cron)."""
        self._table = table
        self._mount_table = mount_table
        self._mounts = mounts
        self._namespace = namespace
        self._jobs = jobs
        self._pins = pins
        self._syncs = syncs
        self._status_interval = status_interval_s
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._counted: dict[str, float] = {}  # dataset -> when its bytes were counted

    async def pass_once(self) -> None:
        """Starts a reconcile of every dataset that has none running."""
        for record in await self._table.all():
            self.kick(record.spec.name)

    def kick(self, name: str) -> None:
        """Reconciles `name` now, unless a reconcile of it runs already."""
        task = self._tasks.get(name)
        if task is None or task.done():
            task = asyncio.create_task(self.reconcile(name))
            self._tasks[name] = task

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    async def reconcile(self, name: str) -> None:
        record = await self._table.get(name, missing_ok=True)
        if record is None:
            return
        status = await self._table.status(name)
        before = status.to_dict()
        if record.deleting:
            await self._delete(record, status)
            return
        spec = record.spec
        try:
            await self._mount(spec, status)
            await self._sync(record, status)
            await self._pin(spec, status)
            await self._preload(record, status)
            phase = self._phase(status)
            # Counted when the phase changes (a preload that ended is Ready with its bytes),
            # else every status interval: a walk of a large dataset is not done every pass.
            await self._count(spec, status, force=phase != status.phase)
            status.observed_generation = record.generation
            status.quota_bytes = spec.cache.quota_bytes
            status.phase = phase
            status.condition("Reconciled", True)
        except ReservoirError as exc:
            status.phase = FAILED
            status.condition("Reconciled", False, type(exc).__name__, str(exc))
            log.warning("dataset_reconcile_failed", dataset=name, error=str(exc))
        if status.to_dict() != before:
            await self._table.save_status(name, status)

    @staticmethod
    def _phase(status: DatasetStatus) -> str:
        if status.running() is not None:
            return PRELOADING
        if any(not c.status for c in status.conditions if c.type != "Reconciled"):
            return FAILED
        return READY

    async def _mount(self, spec: DatasetSpec, status: DatasetStatus) -> None:
        mount = self._mount_table.get(spec.path)
        if mount is not None and mount.options.dataset not in ("", spec.name):
            status.condition(
                "Mounted", False, "PathTaken", f"{spec.path} is dataset {mount.options.dataset}'s"
            )
            raise NotFound(f"{spec.path} belongs to dataset {mount.options.dataset}")
        _, wanted = self._mount_table.admit(spec.path, spec.source.uri, spec.mount_options())
        same_uri = mount is not None and mount.uri.rstrip("/") == spec.source.uri.rstrip("/")
        if mount is None or not same_uri or mount.options != wanted:
            # A mount made by hand at the same path and URI is adopted (its namespace kept).
            mount = await self._mounts.mount(
                spec.path, spec.source.uri, wanted, replace=mount is not None
            )
            log.info("dataset_mounted", dataset=spec.name, path=spec.path, uri=mount.uri)
        status.mounted_uri = mount.uri
        status.condition("Mounted", True)

    async def _sync(self, record: DatasetRecord, status: DatasetStatus) -> None:
        """The namespace loaded from the store once per generation (a changed source, or
        the first apply); afterwards the mount's interval sync and S3 events keep it
        fresh, and what the last interval sync found is the dataset's last sync."""
        if status.synced_generation == record.generation:
            found = await self._syncs.get(record.spec.path)
            if found is not None and found.finished_ms > status.last_sync_ms and not found.error:
                status.last_sync_ms = found.finished_ms
                if not found.baseline and (found.found or found.more_found):
                    status.changed_paths = [] if found.more_found else list(found.found)
                    status.changes_seen += 1
            return
        files = 0
        async for listed, _written, _removed, _done in self._namespace.load_metadata(
            record.spec.path
        ):
            files = listed
        status.synced_generation = record.generation
        status.last_sync_ms = int(self._clock() * 1000)
        status.files = files
        status.condition("Synced", True)
        self._counted.pop(record.spec.name, None)

    async def _pin(self, spec: DatasetSpec, status: DatasetStatus) -> None:
        if spec.cache.pin and not status.pinned:
            await self._pins.pin(spec.path)
        elif status.pinned and not spec.cache.pin:
            await self._pins.unpin(spec.path)
        status.pinned = spec.cache.pin

    async def _preload(self, record: DatasetRecord, status: DatasetStatus) -> None:
        spec, now = record.spec, self._clock()
        for run in status.runs:
            if run.state not in _ENDED:
                await self._follow(run)
        if status.running() is not None:
            return
        failed = [r for r in status.runs[-len(spec.preload_paths()) :] if r.state == "failed"]
        if failed:
            status.condition("Preloaded", False, "JobFailed", f"load job {failed[0].job} failed")
        elif status.runs:
            status.condition("Preloaded", True)
        trigger = ""
        policy = spec.preload.policy
        if policy == "Once" and status.preloaded_generation != record.generation:
            trigger = f"once-{record.generation}"
        elif policy == "Cron":
            due = latest_due(spec.preload.schedule, now)
            if status.cron_last_ms == 0:
                # The first run is the first one scheduled after the apply, not one before.
                status.cron_last_ms = int(now * 1000)
            elif due is not None and due * 1000 > status.cron_last_ms:
                trigger = f"cron-{int(due)}"
                status.cron_last_ms = int(due * 1000)  # missed runs: caught up once
        elif policy == "OnChange" and (
            status.preloaded_generation != status.synced_generation
            or status.preloaded_changes != status.changes_seen
        ):
            trigger = f"change-{status.synced_generation}-{status.changes_seen}"
        if not trigger:
            return
        # After a sync that named what changed: those files only (a load of the rest would
        # cost nothing but the walk: what is cached is not fetched again).
        changed = [
            p
            for p in status.changed_paths
            if any(paths.is_within(p, t) for t in spec.preload_paths())
        ]
        runs = (
            [(spec.path, changed)]
            if trigger.startswith("change") and changed
            else [(path, []) for path in spec.preload_paths()]
        )
        for path, files in runs:
            job = await self._jobs.submit(
                path,
                spec.preload.replicas,
                [],
                False,
                files,
                request_id=_request_id(spec.name, trigger, path),
            )
            status.runs.append(
                PreloadRun(job.id, trigger.split("-")[0], int(now * 1000), job.state)
            )
        del status.runs[:-MAX_RUNS]
        status.preloaded_generation = (
            record.generation if policy == "Once" else status.synced_generation
        )
        status.preloaded_changes = status.changes_seen
        status.changed_paths = []
        self._counted.pop(spec.name, None)
        log.info("dataset_preload_started", dataset=spec.name, trigger=trigger)

    async def _follow(self, run: PreloadRun) -> None:
        try:
            job = await self._jobs.get(run.job)
        except NotFound:
            run.state = "failed"
            return
        run.state, run.done_bytes, run.total_bytes = job.state, job.done_bytes, job.total_bytes

    async def _count(self, spec: DatasetSpec, status: DatasetStatus, force: bool) -> None:
        """Files, bytes and cached bytes below the dataset, now and then (a walk)."""
        now = time.monotonic()
        if not force and now - self._counted.get(spec.name, 0.0) < self._status_interval:
            return
        totals = await self._namespace.report(spec.path)
        status.files = totals["files"]
        status.total_bytes = totals["bytes"]
        status.cached_bytes = totals["cached_bytes"]
        self._counted[spec.name] = now

    async def _delete(self, record: DatasetRecord, status: DatasetStatus) -> None:
        spec = record.spec
        status.phase = DELETING
        await self._table.save_status(spec.name, status)
        for run in status.runs:
            if run.state not in _ENDED:
                with contextlib.suppress(NotFound):
                    await self._jobs.cancel(run.job)
        mount = self._mount_table.get(spec.path)
        if mount is not None and mount.options.dataset == spec.name:
            if status.pinned:
                await self._pins.unpin(spec.path)
            if not record.keep_cache:
                await self._pins.free(spec.path)
            await self._mounts.unmount(spec.path)
        await self._table.forget(spec.name)
        self._counted.pop(spec.name, None)
        log.info("dataset_deleted", dataset=spec.name, kept_cache=record.keep_cache)


def _request_id(name: str, trigger: str, path: str) -> str:
    """The load job's id for this preload: the same for every leader that starts it."""
    return hashlib.blake2b(f"{name}\0{trigger}\0{path}".encode(), digest_size=16).hexdigest()
