"""The SDK's return types, built from the master's and workers' replies: every field
carried over, the handy properties right, and printing a job reads as a sentence."""

from __future__ import annotations

import dataclasses
import datetime
import json

import pytest

from reservoir.cli.cache_rule_commands import rule_dict
from reservoir.cli.job_commands import job_dict
from reservoir.client import (
    CacheReport,
    CacheRule,
    FreeResult,
    JobState,
    LoadJob,
    MetadataLoadProgress,
    PinResult,
    TierStats,
    WorkerStats,
)
from reservoir.common.config import GiB, MiB
from reservoir.v1 import master_pb2, worker_pb2

CREATED_MS = 1_760_000_000_000  # 2025-10-09T08:53:20Z


def _job(**fields: object) -> master_pb2.Job:
    values: dict[str, object] = {
        "id": "j1",
        "path": "/datasets/demo",
        "state": "running",
        "replicas": 2,
        "priority_paths": ["/datasets/demo/a"],
        "total_files": 12,
        "total_blocks": 300,
        "total_bytes": 3 * GiB,
        "done_blocks": 120,
        "done_bytes": 1 * GiB,
        "failed_blocks": 1,
        "errors": ["/datasets/demo/x: gone"],
        "created_ms": CREATED_MS,
        "updated_ms": CREATED_MS + 10_000,
        "attempts": 1,
        "named_files": True,
        "kind": "drain",
        "worker": "w2",
    }
    values.update(fields)
    return master_pb2.Job(**values)  # type: ignore[arg-type]


def test_load_job_carries_every_field_of_the_masters_job() -> None:
    message = _job()
    job = LoadJob.from_proto(message)
    as_dict = dataclasses.asdict(job)
    assert set(as_dict) == {f.name for f in master_pb2.Job.DESCRIPTOR.fields}
    for field in master_pb2.Job.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        expected = tuple(value) if field.is_repeated else value
        assert as_dict[field.name] == expected, field.name
    assert job.state is JobState.RUNNING and job.state == "running"


def test_load_job_is_frozen() -> None:
    job = LoadJob.from_proto(_job())
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.state = JobState.COMPLETED  # type: ignore[misc]


def test_load_job_progress_is_measured_in_bytes_on_the_masters_clock() -> None:
    job = LoadJob.from_proto(_job())
    assert job.fraction_done == pytest.approx(1 / 3)
    assert not job.finished and not job.succeeded
    assert job.created == datetime.datetime(2025, 10, 9, 8, 53, 20, tzinfo=datetime.UTC)
    assert job.updated == job.created + datetime.timedelta(seconds=10)
    assert job.elapsed_s == 10.0
    assert job.bytes_per_second == pytest.approx(GiB / 10)
    assert job.eta_s == pytest.approx(20.0)  # 2 GiB left at 0.1 GiB/s


def test_load_job_before_any_byte_landed_has_no_rate_and_no_eta() -> None:
    job = LoadJob.from_proto(_job(state="pending", done_bytes=0, total_bytes=0, done_blocks=0))
    assert job.bytes_per_second is None and job.eta_s is None
    assert job.fraction_done == 0.0


@pytest.mark.parametrize(
    ("state", "finished", "succeeded"),
    [
        ("pending", False, False),
        ("running", False, False),
        ("completed", True, True),
        ("failed", True, False),
        ("cancelled", True, False),
    ],
)
def test_load_job_finished_and_succeeded_follow_its_state(
    state: str, finished: bool, succeeded: bool
) -> None:
    job = LoadJob.from_proto(_job(state=state))
    assert (job.finished, job.succeeded) == (finished, succeeded)
    if finished:
        assert job.eta_s == 0.0


def test_a_completed_job_with_nothing_to_cache_is_all_done() -> None:
    job = LoadJob.from_proto(_job(state="completed", total_bytes=0, done_bytes=0))
    assert job.fraction_done == 1.0


def test_a_job_prints_as_a_line_a_person_reads() -> None:
    text = str(LoadJob.from_proto(_job(kind="load", worker="")))
    assert text == (
        "load job j1 /datasets/demo: running 33% (1.0GiB of 3.0GiB, 120/300 blocks, 1 failed)"
    )
    drain = str(LoadJob.from_proto(_job()))
    assert drain.startswith("drain job j1 of worker w2: running 33%")
    failed = str(LoadJob.from_proto(_job(state="failed", kind="load", worker="")))
    assert failed.startswith("load job j1 /datasets/demo: failed 33%")
    assert failed.endswith("; first error: /datasets/demo/x: gone")
    assert "\n" not in text and "{" not in text and ":" in text


def test_job_json_keeps_the_clis_shape() -> None:
    """`--json` of a job: every field of the master's record as a plain JSON value, in
    the record's order, then its times in ISO 8601."""
    data = json.loads(json.dumps(job_dict(LoadJob.from_proto(_job()))))
    names = [f.name for f in master_pb2.Job.DESCRIPTOR.fields]
    assert list(data) == [*names, "created", "updated"]
    assert data["state"] == "running" and data["priority_paths"] == ["/datasets/demo/a"]
    assert data["errors"] == ["/datasets/demo/x: gone"] and data["total_bytes"] == 3 * GiB
    assert data["created"] == "2025-10-09T08:53:20+00:00"


def test_metadata_progress_carries_every_field() -> None:
    message = master_pb2.LoadMetadataProgress(
        listed=10, written=8, removed=1, elapsed_ms=1500, done=True
    )
    progress = MetadataLoadProgress.from_proto(message)
    assert dataclasses.asdict(progress) == {
        "listed": 10,
        "written": 8,
        "removed": 1,
        "elapsed_ms": 1500,
        "done": True,
    }
    assert str(progress) == "metadata: listed 10, written 8, removed 1 in 1.5s (done)"


def test_cache_report_carries_the_counts_and_the_cached_share() -> None:
    message = master_pb2.ReportResponse(
        files=4, bytes=8 * MiB, blocks=4, cached_blocks=1, cached_bytes=2 * MiB
    )
    report = CacheReport.from_proto("/d", message)
    assert (report.path, report.files, report.bytes, report.blocks) == ("/d", 4, 8 * MiB, 4)
    assert (report.cached_blocks, report.cached_bytes) == (1, 2 * MiB)
    assert report.cached_fraction == 0.25
    assert str(report) == "/d: 4 files, 8.0MiB; cached 2.0MiB (25.0%), 1/4 blocks"
    assert CacheReport("/empty").cached_fraction == 1.0


def test_free_result_carries_the_counts() -> None:
    message = master_pb2.FreeResponse(files=3, freed_blocks=5, freed_bytes=MiB, pinned_files=1)
    freed = FreeResult.from_proto("/d", message)
    assert dataclasses.asdict(freed) == {
        "path": "/d",
        "files": 3,
        "freed_blocks": 5,
        "freed_bytes": MiB,
        "pinned_files": 1,
    }
    assert str(freed) == "freed 1.0MiB (5 blocks) of /d; 1 pinned files kept"


def test_pin_result_carries_its_rule_and_load_job() -> None:
    rule = master_pb2.CacheRule(
        path="/d/a",
        mount_path="/d",
        ufs_prefix="s3://b/a",
        pinned=True,
        pinned_files=2,
        pinned_bytes=MiB,
        updated_ms=CREATED_MS,
    )
    pinned = PinResult.from_proto(master_pb2.PinResponse(rule=rule, load_job_id="j9"))
    assert pinned.load_job_id == "j9"
    assert pinned.rule == CacheRule("/d/a", "/d", "s3://b/a", True, 2, MiB, 0, CREATED_MS)
    assert rule_dict(pinned.rule)["pinned_bytes"] == MiB
    assert str(pinned) == "pinned /d/a (2 files, 1.0MiB); loading in job j9"


def test_worker_stats_carry_every_counter_and_tier() -> None:
    tier = worker_pb2.TierStats(
        name="disk",
        path="/var/cache",
        used_bytes=10,
        capacity_bytes=100,
        blocks=2,
        evictions=3,
        hits=4,
        in_service=True,
        pinned_bytes=5,
    )
    message = worker_pb2.WorkerStats(
        worker_id="w1",
        hits=7,
        misses=3,
        bytes_from_cache=70,
        bytes_from_ufs=30,
        ufs_gets=3,
        evictions=1,
        used_bytes=10,
        capacity_bytes=100,
        blocks=2,
        corrupt_blocks=1,
        tiers=[tier],
        disk_writes_skipped=6,
        bytes_served={"ufs": 30, "disk": 70},
        ufs_errors=2,
    )
    stats = WorkerStats.from_proto(message)
    as_dict = dataclasses.asdict(stats)
    assert list(as_dict) == [f.name for f in worker_pb2.WorkerStats.DESCRIPTOR.fields]
    for field in worker_pb2.WorkerStats.DESCRIPTOR.fields:
        if field.name not in ("tiers", "bytes_served"):
            assert as_dict[field.name] == getattr(message, field.name), field.name
    assert stats.tiers == (TierStats("disk", "/var/cache", 10, 100, 2, 3, 4, True, 5),)
    assert [f.name for f in worker_pb2.TierStats.DESCRIPTOR.fields] == list(
        dataclasses.asdict(stats.tiers[0])
    )
    assert list(stats.bytes_served.items()) == [("disk", 70), ("ufs", 30)]
    assert stats.hit_ratio == 0.7
    assert WorkerStats("idle").hit_ratio is None
