"""Memory + disk tiers with real processes: a data set larger than memory, restarts,
corruption and failing directories on disk, and eviction on shuffled epochs."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.common.blocks.block_file import HEADER_SIZE
from reservoir.local.cluster import LocalCluster

from ..conftest import LEASE_TTL_S

KiB = 1024
BLOCK = 256 * KiB
FILES = 12  # x 2 blocks = 6 MiB: three times the memory tier, within the disk tier


def _gets(cluster: LocalCluster) -> int:
    return cluster.s3_counts().get("GET", 0)


def _disk_files(cluster: LocalCluster) -> list[Path]:
    root = cluster.disk_dir("worker1") / "v1"
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


@pytest.fixture(scope="module")
def disk_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalCluster, dict[str, bytes]]]:
    cluster = LocalCluster.up(
        tmp_path_factory.mktemp("capacity"),
        workers=1,
        lease_ttl=LEASE_TTL_S,
        capacity="2MiB",
        disk_capacity="16MiB",
    )
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="cap")
        files = {f"/cap/f{i:02d}": os.urandom(2 * BLOCK) for i in range(FILES)}
        for path, data in files.items():
            s3.put_object(Bucket="cap", Key=f"d/{path[5:]}", Body=data)
        with Client(cluster.master_address) as c:
            c.mount("/cap", "s3://cap/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
        yield cluster, files
    finally:
        cluster.down()


def _restart_worker(cluster: LocalCluster) -> None:
    cluster.kill("worker1")
    cluster.start_worker(1)


def test_a_data_set_larger_than_memory_is_loaded_then_read_back_with_no_s3_get(
    disk_cluster: tuple[LocalCluster, dict[str, bytes]],
) -> None:
    cluster, files = disk_cluster
    with Client(cluster.master_address) as c:
        final = c.watch_job(c.submit_load("/cap").id)
        assert final.state == "completed", final.errors
        gets = _gets(cluster)
        assert c.read_many(list(files)) == list(files.values())
        assert _gets(cluster) == gets
        (stats,) = c.worker_stats()
        memory, disk = stats.tiers
        assert memory.used_bytes <= 2 * 1024 * KiB < 2 * FILES * BLOCK
        assert disk.name == "disk" and disk.blocks == 2 * FILES and disk.hits > 0


def test_after_sigkill_and_restart_the_disk_blocks_are_served_with_no_s3_get(
    disk_cluster: tuple[LocalCluster, dict[str, bytes]],
) -> None:
    cluster, files = disk_cluster
    with Client(cluster.master_address) as c:
        c.read_many(list(files))  # held, whatever ran before
    _restart_worker(cluster)
    with Client(cluster.master_address) as c:
        report = c.report("/cap")  # the restarted worker's full report reached the master
        assert report.cached_blocks == report.blocks == 2 * FILES
        gets = _gets(cluster)
        assert c.read_many(list(files)) == list(files.values())
        assert _gets(cluster) == gets


def test_a_corrupted_disk_block_is_never_served_but_fetched_again_and_counted(
    disk_cluster: tuple[LocalCluster, dict[str, bytes]],
) -> None:
    cluster, files = disk_cluster
    with Client(cluster.master_address) as c:
        c.read_many(list(files))
    cluster.stop("worker1")  # memory empty on restart: every block comes from disk
    victim = _disk_files(cluster)[5]
    raw = bytearray(victim.read_bytes())
    raw[HEADER_SIZE + 1000] ^= 0x01
    victim.chmod(0o644)
    victim.write_bytes(bytes(raw))
    cluster.start_worker(1)
    with Client(cluster.master_address) as c:
        gets = _gets(cluster)
        assert c.read_many(list(files)) == list(files.values())
        assert _gets(cluster) - gets <= 1  # that block only (unless dropped at start-up check)
        (stats,) = c.worker_stats()
        assert stats.corrupt_blocks == 1
        assert c.read_many(list(files)) == list(files.values())


def test_a_failing_disk_directory_is_taken_out_of_service_and_reads_succeed(
    disk_cluster: tuple[LocalCluster, dict[str, bytes]],
) -> None:
    cluster, files = disk_cluster
    disk = cluster.disk_dir("worker1")
    shutil.rmtree(disk)
    disk.write_text("this directory is gone; every I/O in it fails")
    try:
        with Client(cluster.master_address) as c:
            for _ in range(2):
                assert c.read_many(list(files)) == list(files.values())
            (stats,) = c.worker_stats()
            assert [t.in_service for t in stats.tiers] == [True, False]
            assert stats.tiers[1].blocks == 0
        log = Path(cluster.processes["worker1"].log).read_text()
        assert "disk_dir_out_of_service" in log
        # The CLI shows it.
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "reservoir.cli.main",
                "--master",
                cluster.master_address,
                "--json",
                "workers",
                "-l",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        (worker,) = json.loads(out)
        assert [t["in_service"] for t in worker["tiers"]] == [True, False]
    finally:
        disk.unlink()


def test_shuffled_epochs_with_half_the_data_set_cached_hit_at_least_45_percent(
    tmp_path: Path,
) -> None:
    files, size = 64, 32 * KiB  # 2 MiB; the cache holds half
    cluster = LocalCluster.up(
        tmp_path / "epochs", workers=1, lease_ttl=LEASE_TTL_S, capacity=str(files * size // 2)
    )
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="epochs")
        for i in range(files):
            s3.put_object(Bucket="epochs", Key=f"d/f{i:03d}", Body=os.urandom(size))
        with Client(cluster.master_address) as c:
            c.mount("/ep", "s3://epochs/d/", endpoint_url=cluster.s3_endpoint, block_size=size)
            paths = [f"/ep/f{i:03d}" for i in range(files)]
            rng = random.Random(3)
            ratios = []
            for _ in range(4):
                rng.shuffle(paths)
                gets = _gets(cluster)
                for path in paths:
                    assert len(c.read(path)) == size
                ratios.append(1 - (_gets(cluster) - gets) / files)
        assert ratios[0] == 0.0 and min(ratios[1:]) >= 0.45, ratios
    finally:
        cluster.down()
