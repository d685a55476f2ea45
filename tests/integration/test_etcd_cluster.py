"""etcd as a three-member cluster (`reservoir local up --etcd-members 3`): the master and
workers are given every member, and a member killed with SIGKILL (the one they all talk
to, made etcd's leader first) loses nothing and fails no read or load.

One cluster serves the whole module: starting one costs seconds, and the CI has two cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster, etcd_binary
from tests.conftest import SECURE, own_cluster_env
from tests.eventually import eventually

MEMBERS = ("etcd1", "etcd2", "etcd3")
BLOCK = 64 * 1024


def cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "--state-dir", str(state_dir), *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=own_cluster_env(),
    )


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    state = tmp_path_factory.mktemp("etcd3") / "state"
    secure = ("--secure",) if SECURE else ()
    done = cli(state, "local", "up", "--workers", "2", "--etcd-members", "3", *secure)
    assert done.returncode == 0, done.stderr
    try:
        yield state
    finally:
        if (state / "cluster.json").exists():
            cli(state, "local", "down")


def etcdctl(cluster: LocalCluster, endpoints: list[int], *args: str) -> str:
    creds = cluster.credentials
    scheme = "https" if creds else "http"
    tls = [f"--cacert={creds.ca}", f"--cert={creds.cert}", f"--key={creds.key}"] if creds else []
    done = subprocess.run(
        [
            str(Path(etcd_binary()).with_name("etcdctl")),
            "--endpoints=" + ",".join(f"{scheme}://127.0.0.1:{p}" for p in endpoints),
            *tls,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def make_leader(cluster: LocalCluster, name: str) -> None:
    """Moves etcd's leadership to member `name` (etcdctl move-leader)."""
    ports = {cluster.processes[m].port: m for m in MEMBERS if cluster.processes[m].alive()}
    statuses = json.loads(etcdctl(cluster, list(ports), "endpoint", "status", "-w", "json"))
    ids = {ports[int(s["Endpoint"].rpartition(":")[2])]: s["Status"]["header"]["member_id"]
           for s in statuses}  # fmt: skip
    leader = statuses[0]["Status"]["leader"]
    if leader != ids[name]:
        at = next(m for m, i in ids.items() if i == leader)
        etcdctl(cluster, [cluster.processes[at].port], "move-leader", format(ids[name], "x"))


@dataclass
class Reader:
    """Reads `files` again and again, each round with a new client (so every round asks
    the master, which asks etcd, about every file), counting reads and failures."""

    cluster: LocalCluster
    files: dict[str, bytes]
    reads: int = 0
    failures: list[str] | None = None

    def __post_init__(self) -> None:
        self.failures = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        assert self.failures is not None
        while not self._stop.is_set():
            try:
                with Client(config=self.cluster.client_config()) as client:
                    for path, data in self.files.items():
                        if client.read(path) != data:
                            self.failures.append(f"{path}: wrong bytes")
                        self.reads += 1
            except Exception as exc:
                self.failures.append(repr(exc))

    def __enter__(self) -> Reader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def upload(cluster: LocalCluster, bucket: str, prefix: str, count: int) -> dict[str, bytes]:
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=bucket)
    files = {}
    for i in range(count):
        data = os.urandom(BLOCK + 997 * i)  # two or three blocks each
        s3.put_object(Bucket=bucket, Key=f"{prefix}/f{i:04d}.bin", Body=data)
        files[f"/{bucket}/f{i:04d}.bin"] = data
    return files


def blocks(files: dict[str, bytes]) -> int:
    return sum(-(-len(data) // BLOCK) for data in files.values())


def test_local_status_shows_three_etcd_members_and_every_server_is_given_all_of_them(
    state_dir: Path,
) -> None:
    done = cli(state_dir, "local", "status", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    members = {n: p for n, p in status["processes"].items() if n.startswith("etcd")}
    assert sorted(members) == list(MEMBERS)
    assert all(p["alive"] for p in members.values())
    endpoints = status["metadata_url"].removeprefix("etcd://").split(",")
    assert endpoints == [f"127.0.0.1:{members[n]['port']}" for n in MEMBERS]
    cluster = LocalCluster.load(state_dir)
    for server in ("master", "worker1", "worker2"):
        assert cluster.processes[server].env["RESERVOIR_METADATA_URL"] == status["metadata_url"]
    text = cli(state_dir, "local", "status")
    assert text.returncode == 0, text.stderr
    rows = [line.split()[:2] for line in text.stdout.splitlines()]
    for member in MEMBERS:
        assert [member, "running"] in rows


def test_sigkill_of_the_etcd_leader_mid_load_loses_nothing_and_fails_no_read(
    state_dir: Path,
) -> None:
    cluster = LocalCluster.load(state_dir)
    warm = upload(cluster, "warm", "d", 10)
    cold = upload(cluster, "cold", "d", 60)
    with Client(config=cluster.client_config()) as c:
        for bucket in ("warm", "cold"):
            c.mount(f"/{bucket}", f"s3://{bucket}/d/", endpoint_url=cluster.s3_endpoint,
                    block_size=BLOCK)  # fmt: skip
        # etcd1 is the first endpoint: the member the master and workers talk to. Made
        # etcd's leader too, its death also costs the cluster an election.
        make_leader(cluster, "etcd1")
        cluster.s3_config(latency_ms=100)  # the load runs for seconds
        try:
            with Reader(cluster, warm) as reader:
                job = c.submit_load("/cold")
                eventually(lambda: c.job(job.id).done_blocks > 0)
                cluster.kill("etcd1")
                reads_at_kill = reader.reads
                assert c.job(job.id).done_blocks < blocks(cold)  # killed mid-load
                final = c.watch_job(job.id)
                eventually(lambda: reader.reads >= reads_at_kill + 2 * len(warm))
        finally:
            cluster.s3_config(latency_ms=0)
        assert reader.failures == [] and reader.reads > reads_at_kill
        assert final.state == "completed", final.errors
        assert final.failed_blocks == 0 and final.done_blocks == final.total_blocks == blocks(cold)
        # Nothing the cluster wrote to etcd before the kill is gone.
        assert sorted(m.path for m in c.mounts()) == ["/cold", "/warm"]
        assert [e.path for e in c.ls("/cold")] == sorted(cold)
        gets = cluster.s3_counts().get("GET", 0)
        assert c.read_many(sorted(cold)) == [cold[p] for p in sorted(cold)]
        assert cluster.s3_counts().get("GET", 0) == gets  # every block was cached by the job

    # The killed member comes back with its data and catches up.
    restarted = cli(state_dir, "local", "restart", "etcd1")
    assert restarted.returncode == 0, restarted.stderr
    status = cli(state_dir, "local", "status", "--json")
    assert status.returncode == 0, status.stderr


def test_resume_starts_the_three_members_again_on_their_ports_with_their_data(
    state_dir: Path,
) -> None:
    before = LocalCluster.load(state_dir)
    ports = {m: before.processes[m].port for m in MEMBERS}
    with Client(config=before.client_config()) as c:
        mounts = sorted(m.path for m in c.mounts())
    assert cli(state_dir, "local", "down").returncode == 0
    refused = cli(state_dir, "local", "up", "--resume", "--etcd-members", "1")
    assert refused.returncode == 1
    assert "--etcd-members 3" in refused.stderr
    done = cli(state_dir, "local", "up", "--resume")
    assert done.returncode == 0, done.stderr
    after = LocalCluster.load(state_dir)
    assert {m: after.processes[m].port for m in MEMBERS} == ports
    assert after.metadata_url == before.metadata_url
    with Client(config=after.client_config()) as c:
        assert sorted(m.path for m in c.mounts()) == mounts
