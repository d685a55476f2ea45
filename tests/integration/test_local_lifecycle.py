"""`reservoir local up` / `local down` on one state directory, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster, free_port
from tests.conftest import SECURE, own_cluster_env


class Cli:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "reservoir.cli.main", "--state-dir", str(self.state_dir), *args],
            capture_output=True,
            text=True,
            timeout=180,
            env=own_cluster_env(),
        )

    def up(self, *args: str) -> str:
        secure = ("--secure",) if SECURE else ()
        done = self("local", "up", "--workers", "1", *secure, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()  # the master address


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    cli = Cli(tmp_path / "state")
    try:
        yield cli
    finally:
        if (cli.state_dir / "cluster.json").exists():
            cli("local", "down")


def _mount_with_data(cli: Cli, content: bytes) -> None:
    cluster = LocalCluster.load(cli.state_dir)
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket="life")
    s3.put_object(Bucket="life", Key="d/a.bin", Body=content)
    with Client(config=cluster.client_config()) as c:
        c.mount("/life", "s3://life/d/", endpoint_url=cluster.s3_endpoint)
        assert c.read("/life/a.bin") == content


def test_up_after_down_starts_a_clean_cluster_without_the_old_mounts(cli: Cli) -> None:
    cli.up()
    _mount_with_data(cli, os.urandom(5000))
    assert cli("local", "down").returncode == 0
    status = cli("local", "status")
    assert status.returncode == 1 and "stopped" in status.stderr and "--resume" in status.stderr
    master = cli.up()
    with Client(config=LocalCluster.load(cli.state_dir).client_config()) as c:
        assert c.config.master == master
        assert c.mounts() == []
        with pytest.raises(FileNotFoundError):
            c.ls("/life")
    cluster = LocalCluster.load(cli.state_dir)
    assert "life" not in [b["Name"] for b in cluster.s3_client().list_buckets()["Buckets"]]


def test_up_resume_brings_back_the_mounts_and_the_managed_s3_data_on_its_old_port(
    cli: Cli,
) -> None:
    content = os.urandom(300_000)
    cli.up()
    endpoint = LocalCluster.load(cli.state_dir).s3_endpoint
    _mount_with_data(cli, content)
    assert cli("local", "down").returncode == 0
    master = cli.up("--resume")
    assert LocalCluster.load(cli.state_dir).s3_endpoint == endpoint
    with Client(config=LocalCluster.load(cli.state_dir).client_config()) as c:
        assert c.config.master == master
        assert [(m.path, m.options.endpoint_url) for m in c.mounts()] == [("/life", endpoint)]
        assert [e.path for e in c.ls("/life")] == ["/life/a.bin"]
        assert c.read("/life/a.bin") == content


def test_up_refuses_while_the_cluster_of_the_state_dir_is_running(cli: Cli) -> None:
    master = cli.up()
    again = cli("local", "up", "--workers", "1")
    assert again.returncode == 1
    assert "already running" in again.stderr and master in again.stderr
    status = json.loads(cli("--json", "local", "status").stdout)
    assert status["master"] == master and all(p["alive"] for p in status["processes"].values())


def test_resume_refuses_when_the_stopped_clusters_external_s3_is_gone(
    cli: Cli, tmp_path: Path
) -> None:
    port = free_port()
    s3 = subprocess.Popen(
        [sys.executable, "-m", "reservoir.local.s3server", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        cli.up("--s3-endpoint", f"http://127.0.0.1:{port}")
    finally:
        s3.kill()
        s3.wait(timeout=10)
    assert cli("local", "down").returncode == 0
    resumed = cli("local", "up", "--workers", "1", "--resume")
    assert resumed.returncode == 1
    assert "unreachable" in resumed.stderr and f"127.0.0.1:{port}" in resumed.stderr
    assert not (cli.state_dir / "cluster.json").exists()


def test_resume_refuses_when_there_is_no_stopped_cluster(cli: Cli) -> None:
    done = cli("local", "up", "--workers", "1", "--resume")
    assert done.returncode == 1 and "no stopped local cluster" in done.stderr
