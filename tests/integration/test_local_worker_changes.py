"""`reservoir local add-worker` and `local remove-worker` on a cluster of their own, as a user
runs them: the cluster grows and shrinks, `local status` shows each worker with its state,
and `local up --resume` brings back the workers it had (each with its own options), not
the ones removed."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.integration.test_local_lifecycle import Cli

MiB = 1024 * 1024
BLOCK = 256 * 1024


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    cli = Cli(tmp_path / "state")
    try:
        yield cli
    finally:
        if (cli.state_dir / "cluster.json").exists():
            cli("local", "down")


def _client(cli: Cli) -> Client:
    return Client(config=LocalCluster.load(cli.state_dir).client_config())


def _status(cli: Cli) -> dict[str, Any]:
    done = cli("--json", "local", "status")
    assert done.returncode == 0, done.stderr
    status: dict[str, Any] = json.loads(done.stdout)
    return status


def _workers(status: dict[str, Any]) -> dict[str, str]:
    """Each worker process `local status` lists, with its state as the master has it."""
    return {
        name: p["worker_state"] for name, p in status["processes"].items() if "worker_state" in p
    }


def _data_set(cli: Cli) -> dict[str, bytes]:
    cluster = LocalCluster.load(cli.state_dir)
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket="grow")
    files = {f"/grow/f{i:02d}": os.urandom(2 * BLOCK - i) for i in range(12)}
    for path, data in files.items():
        s3.put_object(Bucket="grow", Key=f"d/{path[6:]}", Body=data)
    with _client(cli) as client:
        client.mount("/grow", "s3://grow/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
        assert client.watch_job(client.submit_load("/grow").id).succeeded
    return files


def _gets(cli: Cli) -> int:
    return LocalCluster.load(cli.state_dir).s3_counts().get("GET", 0)


def test_an_added_worker_serves_with_its_own_options_and_resume_brings_it_back(
    cli: Cli,
) -> None:
    cli.up()
    added = cli("local", "add-worker", "--capacity", "64MiB")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "worker2"
    assert _workers(_status(cli)) == {"worker1": "serving", "worker2": "serving"}
    with _client(cli) as client:
        capacity = {w.id: w.capacity_bytes for w in client.workers()}
    assert capacity["worker2"] == 64 * MiB and capacity["worker1"] != 64 * MiB

    assert cli("local", "down").returncode == 0
    resumed = cli("local", "up", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert _workers(_status(cli)) == {"worker1": "serving", "worker2": "serving"}
    with _client(cli) as client:
        assert {w.id: w.capacity_bytes for w in client.workers()} == capacity


def test_remove_worker_with_drain_keeps_its_blocks_and_resume_leaves_it_out(cli: Cli) -> None:
    cli.up()
    assert cli("local", "add-worker").returncode == 0
    files = _data_set(cli)
    with _client(cli) as client:
        held = {s.worker_id: s.blocks for s in client.worker_stats()}
    assert held["worker2"] > 0

    removed = cli("local", "remove-worker", "worker2", "--drain", "--timeout", "2m")
    assert removed.returncode == 0, removed.stderr
    assert _workers(_status(cli)) == {"worker1": "serving"}
    before = _gets(cli)
    with _client(cli) as client:
        for path, data in files.items():
            assert client.read(path) == data
    assert _gets(cli) == before  # worker2's blocks were moved, not lost

    assert cli("local", "down").returncode == 0
    assert cli("local", "up", "--resume").returncode == 0
    assert _workers(_status(cli)) == {"worker1": "serving"}


def test_remove_worker_without_drain_stops_it_and_the_next_added_worker_takes_a_new_number(
    cli: Cli,
) -> None:
    cli.up()
    assert cli("local", "add-worker").stdout.strip() == "worker2"
    assert cli("local", "add-worker").stdout.strip() == "worker3"
    worker2 = LocalCluster.load(cli.state_dir).processes["worker2"]
    assert cli("local", "remove-worker", "worker2").returncode == 0
    assert not worker2.alive()
    assert set(_workers(_status(cli))) == {"worker1", "worker3"}
    assert cli("local", "add-worker").stdout.strip() == "worker4"


def test_a_drain_that_times_out_leaves_the_worker_running_and_fails_saying_so(cli: Cli) -> None:
    cli.up()
    assert cli("local", "add-worker").returncode == 0
    _data_set(cli)
    removed = cli("local", "remove-worker", "worker2", "--drain", "--timeout", "0s")
    assert removed.returncode == 1
    assert "not done after 0s" in removed.stderr and "still runs" in removed.stderr
    cluster = LocalCluster.load(cli.state_dir)
    assert cluster.processes["worker2"].alive()
    # The drain goes on; waiting for it a second time finishes the removal.
    assert cli("local", "remove-worker", "worker2", "--drain").returncode == 0
    assert set(_workers(_status(cli))) == {"worker1"}


def test_remove_worker_refuses_an_unknown_name_listing_the_workers_and_the_last_worker(
    cli: Cli,
) -> None:
    cli.up()
    unknown = cli("local", "remove-worker", "worker7")
    assert unknown.returncode == 1
    assert "no worker 'worker7'" in unknown.stderr and "worker1" in unknown.stderr
    last = cli("local", "remove-worker", "worker1", "--drain")
    assert last.returncode == 1 and "last worker" in last.stderr
    assert LocalCluster.load(cli.state_dir).processes["worker1"].alive()


def test_add_worker_without_a_running_cluster_says_to_start_one(cli: Cli) -> None:
    done = cli("local", "add-worker")
    assert done.returncode == 1
    assert "no local cluster" in done.stderr and "reservoir local up" in done.stderr
