"""The leader's dataset reconciler on the in-process memory:// store with file://
under-stores (no sockets): a dataset is mounted, synced and preloaded by its policy, an
unchanged apply changes nothing, a changed one only what changed, a cron preload runs on
schedule (a fake clock), and a delete unmounts it. Load jobs are recorded by a stand-in:
running them needs workers (tests/integration/test_datasets.py runs them for real)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from reservoir.common.config import MasterConfig
from reservoir.common.errors import AlreadyExists, NotFound
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import MountOptions
from reservoir.master.dataset_reconciler import DatasetReconciler
from reservoir.master.interval_sync import SyncRecord, SyncRecords
from reservoir.master.job_records import Job
from reservoir.master.service import MasterService


class RecordedJobs:
    """Load jobs as submitted: one per request id, as the master's table keeps them."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.files: list[list[str]] = []  # what each submission named (empty: all of it)

    async def submit(
        self,
        path: str,
        replicas: int,
        priority_paths: list[str],
        metadata_only: bool,
        files: Sequence[str] = (),
        *,
        request_id: str = "",
    ) -> Job:
        if request_id not in self.jobs:
            self.files.append(list(files))
        return self.jobs.setdefault(request_id, Job(id=request_id[:12], path=path))

    async def get(self, job_id: str) -> Job:
        for job in self.jobs.values():
            if job.id == job_id:
                return job
        raise NotFound(job_id)

    async def cancel(self, job_id: str) -> Job:
        job = await self.get(job_id)
        job.state = "cancelled"
        return job

    def finish_all(self) -> None:
        for job in self.jobs.values():
            job.state = "completed"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _setup(
    tmp_path: Path, now: float = 0.0
) -> tuple[MasterService, DatasetReconciler, RecordedJobs, Clock, str]:
    root = tmp_path / "bucket"
    root.mkdir()
    for name in ("a.bin", "b.bin"):
        (root / name).write_bytes(name.encode() * 100)
    config = MasterConfig(metadata_url="memory://", allowed_schemes="s3,file")
    master_store = MemoryMetadataStore()
    master = MasterService(master_store, config)
    jobs, clock = RecordedJobs(), Clock(now)
    reconciler = DatasetReconciler(
        master.datasets, master.mount_table, master, master.reads, jobs, master.cache_rules,
        SyncRecords(master_store), status_interval_s=0.0, clock=clock,
    )  # fmt: skip
    return master, reconciler, jobs, clock, f"file://{root}/"


def _doc(uri: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "ds"}, "spec": {"source": {"uri": uri}, "path": "/ds", **spec}}


def test_an_applied_dataset_is_mounted_synced_and_preloaded_once_then_left_alone(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        master, reconciler, jobs, _, uri = _setup(tmp_path)
        await master.datasets.apply(_doc(uri, preload={"policy": "Once"}), [])
        await reconciler.reconcile("ds")
        mount = master.mount_table.get("/ds")
        assert mount is not None and mount.options.dataset == "ds"
        status = await master.datasets.status("ds")
        assert status.phase == "Preloading" and status.files == 2
        assert [r.trigger for r in status.runs] == ["once"]
        jobs.finish_all()
        await reconciler.reconcile("ds")
        status = await master.datasets.status("ds")
        assert status.phase == "Ready" and status.observed_generation == 1
        # Applied again unchanged: same generation, no second preload, no remount.
        record = await master.datasets.apply(_doc(uri, preload={"policy": "Once"}), master.mounts())
        assert record.generation == 1
        await reconciler.reconcile("ds")
        assert len(jobs.jobs) == 1
        assert master.mount_table.get("/ds") == mount

    asyncio.run(scenario())


def test_a_changed_policy_changes_the_mount_options_and_keeps_its_namespace(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        master, reconciler, _, _, uri = _setup(tmp_path)
        await master.datasets.apply(_doc(uri), [])
        await reconciler.reconcile("ds")
        before = await master.reads.file_info("/ds/a.bin")
        record = await master.datasets.apply(_doc(uri, sync={"interval": "30s"}), master.mounts())
        assert record.generation == 2
        await reconciler.reconcile("ds")
        mount = master.mount_table.get("/ds")
        assert mount is not None and mount.options.metadata_sync == "interval:30s"
        assert await master.namespace.get("/ds/a.bin") == before  # not dropped

    asyncio.run(scenario())


def test_a_cron_preload_runs_on_its_schedule_and_catches_up_once(tmp_path: Path) -> None:
    day = 86400.0

    async def scenario() -> None:
        master, reconciler, jobs, clock, uri = _setup(tmp_path, now=10 * day + 3600)
        cron = {"policy": "Cron", "schedule": "0 3 * * *"}
        await master.datasets.apply(_doc(uri, preload=cron), [])
        await reconciler.reconcile("ds")
        assert jobs.jobs == {}  # applied at 01:00: the first run is at 03:00
        clock.now = 10 * day + 3 * 3600
        await reconciler.reconcile("ds")
        assert len(jobs.jobs) == 1
        jobs.finish_all()
        clock.now = 10 * day + 5 * 3600
        await reconciler.reconcile("ds")
        assert len(jobs.jobs) == 1  # not due again until tomorrow
        clock.now = 14 * day + 4 * 3600  # four days without a master
        await reconciler.reconcile("ds")
        await reconciler.reconcile("ds")
        assert len(jobs.jobs) == 2  # caught up once
        status = await master.datasets.status("ds")
        assert [r.trigger for r in status.runs] == ["cron", "cron"]

    asyncio.run(scenario())


def test_an_on_change_preload_loads_what_each_sync_found_changed(tmp_path: Path) -> None:
    async def scenario() -> None:
        master, reconciler, jobs, _, uri = _setup(tmp_path)
        await master.datasets.apply(_doc(uri, preload={"policy": "OnChange"}), [])
        await reconciler.reconcile("ds")
        assert jobs.files == [[]]  # the first sync: all of it
        jobs.finish_all()
        await reconciler.reconcile("ds")
        assert len(jobs.jobs) == 1  # nothing changed since
        syncs = SyncRecords(master._store)
        found = SyncRecord(
            "/ds", 1, started_ms=1, finished_ms=2**41, changed=1, found=["/ds/a.bin"]
        )
        await syncs.put(found)
        await reconciler.reconcile("ds")
        assert jobs.files == [[], ["/ds/a.bin"]]
        jobs.finish_all()
        await reconciler.reconcile("ds")
        assert len(jobs.jobs) == 2  # that sync is preloaded: not again
        status = await master.datasets.status("ds")
        assert status.last_sync_ms == 2**41

    asyncio.run(scenario())


def test_a_dataset_cannot_take_a_path_mounted_by_hand_from_another_store(tmp_path: Path) -> None:
    async def scenario() -> None:
        master, reconciler, _, _, uri = _setup(tmp_path)
        other = tmp_path / "other"
        other.mkdir()
        await master.mount("/ds", f"file://{other}/", MountOptions())
        with pytest.raises(AlreadyExists, match="mounted by hand"):
            await master.datasets.apply(_doc(uri), master.mounts())
        # The same store mounted by hand is adopted, its namespace kept.
        await master.unmount("/ds")
        await master.mount("/ds", uri, MountOptions())
        await master.reads.list_directory("/ds")
        await master.datasets.apply(_doc(uri), master.mounts())
        await reconciler.reconcile("ds")
        mount = master.mount_table.get("/ds")
        assert mount is not None and mount.options.dataset == "ds"

    asyncio.run(scenario())


def test_a_deleted_dataset_is_unmounted_and_forgotten(tmp_path: Path) -> None:
    async def scenario() -> None:
        master, reconciler, _, _, uri = _setup(tmp_path)
        await master.datasets.apply(_doc(uri), [])
        await reconciler.reconcile("ds")
        await master.datasets.mark_deleting("ds", keep_cache=True)
        await reconciler.reconcile("ds")
        assert master.mount_table.get("/ds") is None
        assert await master.datasets.all() == []
        with pytest.raises(NotFound):
            await master.datasets.get("ds")

    asyncio.run(scenario())


def test_status_survives_as_json(tmp_path: Path) -> None:
    async def scenario() -> None:
        master, reconciler, _, _, uri = _setup(tmp_path)
        await master.datasets.apply(_doc(uri, preload={"policy": "Once"}), [])
        await reconciler.reconcile("ds")
        status = await master.datasets.status("ds")
        assert dataclasses.asdict(status)["runs"][0]["trigger"] == "once"
        assert {c.type for c in status.conditions} >= {"Mounted", "Synced", "Reconciled"}

    asyncio.run(scenario())
