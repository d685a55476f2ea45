"""The `reservoir` command against a real cluster, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reservoir.local.cluster import LocalCluster
from tests.conftest import new_mount_path, own_cluster_env


def _cli(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "--master", cluster.master_address, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )


def test_mount_ls_stat_cat_cp_round_trip(
    cluster: LocalCluster, bucket: str, tmp_path: Path
) -> None:
    s3 = cluster.s3_client()
    payload = os.urandom(300_000)
    s3.put_object(Bucket=bucket, Key="cli/a.bin", Body=payload)
    s3.put_object(Bucket=bucket, Key="cli/dir/b.txt", Body=b"hello")
    root = new_mount_path()
    done = _cli(cluster, "mount", root, f"s3://{bucket}/cli", "--endpoint-url", cluster.s3_endpoint)
    assert done.returncode == 0, done.stderr
    assert root in _cli(cluster, "mounts").stdout
    assert _cli(cluster, "ls", root).stdout.split() == ["a.bin", "dir/"]
    listing = json.loads(_cli(cluster, "--json", "ls", "-l", root).stdout)
    assert [(e["path"], e["size"]) for e in listing] == [
        (f"{root}/a.bin", 300_000),
        (f"{root}/dir", 0),
    ]
    stat = json.loads(_cli(cluster, "--json", "stat", f"{root}/a.bin").stdout)
    assert stat["size"] == 300_000 and stat["type"] == "file"
    assert _cli(cluster, "cat", f"{root}/dir/b.txt").stdout == "hello"
    target = tmp_path / "a.bin"
    assert _cli(cluster, "cp", f"{root}/a.bin", str(target)).returncode == 0
    assert target.read_bytes() == payload
    workers = json.loads(_cli(cluster, "--json", "workers").stdout)
    assert len(workers) == 3


def test_report_right_after_load_wait_counts_every_block_cached(
    cluster: LocalCluster, bucket: str
) -> None:
    s3 = cluster.s3_client()
    for i in range(40):
        s3.put_object(Bucket=bucket, Key=f"load/f{i:02d}.bin", Body=os.urandom(1000 + 40_000 * i))
    root = new_mount_path()
    mounted = _cli(
        cluster,
        "mount",
        root,
        f"s3://{bucket}/load",
        "--endpoint-url",
        cluster.s3_endpoint,
        "--block-size",
        "64KiB",
    )
    assert mounted.returncode == 0, mounted.stderr
    load = _cli(cluster, "--json", "load", root, "--wait")
    assert load.returncode == 0, load.stderr
    assert json.loads(load.stdout)["state"] == "completed"
    report = json.loads(_cli(cluster, "--json", "report", root).stdout)
    assert report["cached_blocks"] == report["blocks"] > 40
    assert report["cached_bytes"] == report["bytes"]


def test_errors_are_one_line_with_nonzero_exit(cluster: LocalCluster) -> None:
    done = _cli(cluster, "cat", "/not/mounted")
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert "no such file" in done.stderr
    bad = _cli(cluster, "ls", "/a/../b")
    assert bad.returncode == 1 and ".." in bad.stderr


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "secure"])
def test_local_cluster_up_status_down_from_the_command_line(tmp_path: Path, secure: bool) -> None:
    state = str(tmp_path / "state")
    base = [sys.executable, "-m", "reservoir.cli.main", "--state-dir", state]
    env = own_cluster_env()

    def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], capture_output=True, text=True, timeout=timeout, env=env
        )

    up = run("local", "up", "--workers", "1", *(["--secure"] if secure else []), timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        master = up.stdout.strip()
        status = json.loads(run("--json", "local", "status").stdout)
        assert status["master"] == master
        assert all(p["alive"] for p in status["processes"].values())
        # The master address (and for --secure the CA and admin token) come from
        # cluster.json when no flag or variable names them.
        workers = run("--json", "workers")
        assert workers.returncode == 0, workers.stderr
        assert [w["id"] for w in json.loads(workers.stdout)] == ["worker1"]
        recorded = json.loads((tmp_path / "state" / "cluster.json").read_text())
        if secure:
            assert Path(recorded["tls_ca"]).is_file()
            assert sorted(recorded["tokens"]) == ["admin", "reader", "worker"]
            # Without the CA and a token nothing answers but the health service.
            bare = subprocess.run(
                [sys.executable, "-m", "reservoir.cli.main", "--master", master, "workers"],
                capture_output=True,
                text=True,
                timeout=30,
                env=env,
            )
            assert bare.returncode == 1
        else:
            assert "tls_ca" not in recorded
    finally:
        down = run("local", "down", timeout=120)
    assert down.returncode == 0
    assert not (tmp_path / "state" / "cluster.json").exists()
