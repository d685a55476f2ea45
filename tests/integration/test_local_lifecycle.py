"""`reservoir local up` / `local down` on one state directory, as a user runs them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster, free_port
from reservoir.local.process import port_is_free
from tests.conftest import SECURE, block_files, new_mount_path, own_cluster_env


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


def _ports(status: dict[str, Any]) -> dict[str, Any]:
    """Every address a user may have exported or configured, from `local status --json`."""
    return {
        "master": status["master"],
        "s3": status["s3_endpoint"],
        "gateway": status.get("gateway"),
        "etcd": status["metadata_url"],
        **{name: (p["port"], p.get("metrics")) for name, p in status["processes"].items()},
    }


def test_resume_keeps_every_port_so_an_exported_master_and_s3_still_answer(
    cli: Cli, tmp_path: Path
) -> None:
    content = os.urandom(10_000)
    cli.up("--gateway")
    _mount_with_data(cli, content)
    before = json.loads(cli("--json", "local", "status").stdout)
    # The gateway's metrics are in `local status` beside the servers' (and keep their port).
    with urllib.request.urlopen(before["processes"]["gateway"]["metrics"], timeout=10) as got:
        assert b"reservoir_gateway_requests" in got.read()
    recorded = json.loads((cli.state_dir / "cluster.json").read_text())
    assert cli("local", "down").returncode == 0
    resumed = cli("local", "up", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    after = json.loads(cli("--json", "local", "status").stdout)
    assert _ports(after) == _ports(before)
    assert {p["pid"] for p in after["processes"].values()}.isdisjoint(
        p["pid"] for p in before["processes"].values()
    )
    # What a user exported before `down` (no state dir to find the cluster by) still works.
    exported = {**own_cluster_env(), "RESERVOIR_MASTER": before["master"]}
    if "tls_ca" in recorded:
        exported |= {
            "RESERVOIR_TLS_CA": recorded["tls_ca"],
            "RESERVOIR_TOKEN_FILE": recorded["tokens"]["admin"],
        }
    cat = subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "--state-dir", str(tmp_path / "none"),
         "cat", "/life/a.bin"],
        capture_output=True,
        timeout=60,
        env=exported,
    )  # fmt: skip
    assert cat.returncode == 0, cat.stderr
    assert cat.stdout == content


def _hold_port(port: int) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import socket, sys, time\n"
         "s = socket.socket()\n"
         f"s.bind(('127.0.0.1', {port}))\n"
         "s.listen()\n"
         "print('listening', flush=True)\n"
         "time.sleep(300)\n"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "listening"
    return holder


def test_resume_refuses_a_port_another_process_holds_naming_the_port_and_that_process(
    cli: Cli,
) -> None:
    cli.up()
    worker_port = LocalCluster.load(cli.state_dir).processes["worker1"].port
    assert cli("local", "down").returncode == 0
    holder = _hold_port(worker_port)
    try:
        refused = cli("local", "up", "--resume")
        command_name = Path(f"/proc/{holder.pid}/comm").read_text().strip()
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"port {worker_port} (worker1) is held by pid {holder.pid} ({command_name})" in (
        refused.stderr
    )
    assert not (cli.state_dir / "cluster.json").exists()  # nothing started
    assert cli.up("--resume")  # the stopped cluster is intact: once the port is free, it resumes
    assert LocalCluster.load(cli.state_dir).processes["worker1"].port == worker_port


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


def test_a_port_whose_old_connections_wait_in_time_wait_counts_as_free() -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as every server here
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port)) as client:
        served, _ = listener.accept()
        assert not port_is_free(port)  # listened on
        served.close()  # the server closes first: its end of the connection is in TIME_WAIT
        assert client.recv(1) == b""
    listener.close()
    assert not _binds_without_reuse(port)  # how the check once saw it: "in use" for a minute
    assert port_is_free(port)


# ---- a --secure --shm cluster stopped and resumed, then one process restarted -------------


@dataclass
class Resumed:
    cli: Cli
    content: bytes
    refused: dict[str, subprocess.CompletedProcess[str]]  # flag -> `up --resume FLAG`
    resumed: subprocess.CompletedProcess[str]  # `up --resume`, right after `down`
    # After `down`, the old S3 port had a connection in TIME_WAIT (so a bind without
    # SO_REUSEADDR failed): the state in which resume was once refused for a minute.
    s3_port_lingering: bool

    def cluster(self) -> LocalCluster:
        return LocalCluster.load(self.cli.state_dir)

    def read(self) -> bytes:
        with Client(config=self.cluster().client_config()) as c:
            return c.read("/life/a.bin")


def _a_connection_the_server_closes(port: int) -> None:
    """What the S3 server does to idle keep-alive connections (of the workers, say): it
    closes them first, so they wait in TIME_WAIT on its port for a minute. An HTTP/1.0
    request makes that happen now, not after the server's idle timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET /_reservoir/stats HTTP/1.0\r\n\r\n")
        while conn.recv(65536):  # to the server's close
            pass


def _binds_without_reuse(port: int) -> bool:
    with socket.socket() as plain:
        try:
            plain.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


_SCHEMES = "RESERVOIR_ALLOWED_SCHEMES=s3,file"  # a setting `local up --env` records


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Resumed]:
    """One cluster for the resume tests (CI time): started `--secure --shm` with a mount,
    stopped, resumed with contradicting flags (refused), then resumed with none."""
    cli = Cli(tmp_path_factory.mktemp("resume") / "state")
    up = cli("local", "up", "--workers", "1", "--secure", "--shm", "--env", _SCHEMES)
    assert up.returncode == 0, up.stderr
    try:
        content = os.urandom(200_000)
        _mount_with_data(cli, content)
        s3_port = LocalCluster.load(cli.state_dir).processes["s3"].port
        _a_connection_the_server_closes(s3_port)
        down = cli("local", "down")
        assert down.returncode == 0, down.stderr
        lingering = not _binds_without_reuse(s3_port)
        refused = {}
        for flag in ("--no-secure", "--no-shm", "--workers 2", "--env RESERVOIR_LOG_LEVEL=debug"):
            refused[flag] = cli("local", "up", "--resume", *flag.split())
            if refused[flag].returncode == 0:  # not refused: the other tests still need theirs
                cli("local", "down")
        again = cli("local", "up", "--resume")
        yield Resumed(cli, content, refused, again, lingering)
    finally:
        if (cli.state_dir / "cluster.json").exists():
            cli("local", "down")


def test_resume_right_after_down_brings_back_the_secure_shm_cluster_as_it_was(
    resumed: Resumed, tmp_path: Path
) -> None:
    assert resumed.s3_port_lingering
    assert resumed.resumed.returncode == 0, resumed.resumed.stderr  # no "port … in use"
    recorded: dict[str, Any] = json.loads((resumed.cli.state_dir / "cluster.json").read_text())
    assert recorded["settings"]["secure"] and recorded["settings"]["shm"]
    assert recorded["settings"]["workers"] == 1 and "tls_ca" in recorded
    assert recorded["settings"]["env"] == dict([_SCHEMES.split("=", 1)])
    cluster = resumed.cluster()
    assert resumed.read() == resumed.content  # with the cluster's CA and admin token
    assert block_files(cluster, "worker1")  # the blocks are in /dev/shm again
    # A user without the CA, or with it but without a token, reads nothing.
    nowhere = str(tmp_path / "no-cluster")
    ca = {"RESERVOIR_TLS_CA": recorded["tls_ca"]}
    for extra in ({}, ca):
        bare = subprocess.run(
            [sys.executable, "-m", "reservoir.cli.main", "--master", cluster.master_address,
             "--state-dir", nowhere, "cat", "/life/a.bin"],
            capture_output=True,
            timeout=60,
            env={**own_cluster_env(), **extra},
        )  # fmt: skip
        assert bare.returncode == 1 and bare.stdout == b"", extra
        assert bare.stderr.decode().count("\n") == 1


def test_resume_refuses_a_flag_that_contradicts_the_stopped_cluster_in_one_line(
    resumed: Resumed,
) -> None:
    for flag, done in resumed.refused.items():
        assert done.returncode == 1, (flag, done.stderr)
        assert done.stderr.count("\n") == 1 and f"cannot resume with {flag}" in done.stderr
    assert "a resumed cluster keeps its security" in resumed.refused["--no-secure"].stderr
    assert "started with --workers 1" in resumed.refused["--workers 2"].stderr


def test_status_exits_1_while_a_process_is_dead_and_restart_starts_that_one_alone(
    resumed: Resumed, tmp_path: Path
) -> None:
    cli, before = resumed.cli, resumed.cluster()
    before.kill("worker1")
    status = cli("local", "status")
    assert status.returncode == 1
    rows = [line.split()[:2] for line in status.stdout.splitlines()[2:]]  # the table too
    assert ["worker1", "DEAD"] in rows and ["master", "running"] in rows
    errors = [line for line in status.stderr.splitlines() if line.startswith("reservoir: error")]
    assert len(errors) == 1 and "worker1" in errors[0]  # one line, besides the S3 exports
    for name in ("worker1", "master"):  # a dead one; a live one (stopped, then started)
        done = cli("local", "restart", name)
        assert done.returncode == 0, done.stderr
    after = json.loads(cli("--json", "local", "status").stdout)
    assert all(p["alive"] for p in after["processes"].values())
    for name, p in after["processes"].items():
        assert p["port"] == before.processes[name].port
        assert (p["pid"] == before.processes[name].pid) == (name not in ("worker1", "master"))
    assert cli("local", "status").returncode == 0
    assert resumed.read() == resumed.content
    # The restarted master has the setting `local up --env` gave, not the restarting shell's.
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "f.txt").write_bytes(b"from file://")
    mounted = cli("mount", new_mount_path(), (tmp_path / "files").as_uri() + "/")
    assert mounted.returncode == 0, mounted.stderr
    unknown = cli("local", "restart", "worker9")
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1
    assert "worker1" in unknown.stderr
