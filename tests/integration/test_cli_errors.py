"""What the `reservoir` command says when something is wrong, run as a user runs it: one
line on stderr naming the problem, exit code 1, never gRPC's own text or a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from urllib.parse import urlparse

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.conftest import new_mount_path

# What gRPC's errors look like as text; none of it may reach a user.
RAW_GRPC = ("StatusCode.", "<_InactiveRpcError", "grpc_status", "debug_error_string", "Traceback")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stdout
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("reservoir"), done.stderr
    assert not [raw for raw in RAW_GRPC if raw in done.stderr], done.stderr
    return done.stderr.strip()


def test_a_master_address_that_is_another_server_says_what_answers_there(
    cluster: LocalCluster,
) -> None:
    metrics = urlparse(cluster.status()["processes"]["master"]["metrics"]).netloc
    answers = {
        f"127.0.0.1:{cluster.processes['worker1'].port}": "as a Reservoir worker",
        f"127.0.0.1:{cluster.processes['etcd'].port}": "as etcd",
        metrics: "HTTP/1.x, not gRPC",  # the master's own /metrics port
    }
    for address, answer in answers.items():
        said = _one_line_error(_run("--master", address, "workers"))
        if cluster.credentials is not None and "worker" not in answer:
            answer = "without TLS"  # a secure run meets the plaintext port in the handshake
        assert (
            said == f"reservoir: error: {address} is not a Reservoir master (it answers {answer})"
        )
    # A list with a wrong address in it is passed over to the master that leads.
    listed = _run("--master", f"{next(iter(answers))},{cluster.master_address}", "workers")
    assert listed.returncode == 0, listed.stderr


def test_a_mistyped_option_or_subcommand_suggests_the_closest_one() -> None:
    for argv, meant in (
        (("workers", "--jsn"), "--json"),
        (("--jsn", "workers"), "--json"),
        (("workers", "--lnog"), "--long"),
        (("lss", "/"), "ls"),
        (("local", "stauts"), "status"),
        (("job", "cancle", "x"), "cancel"),
    ):
        said = _one_line_error(_run(*argv))
        assert f"did you mean {meant}?" in said and "--help" in said, argv
    # Nothing close: the subcommands are listed instead.
    assert "choose from 'local'" in _one_line_error(_run("zzzzzz"))


def test_cancelling_a_finished_job_says_it_already_finished_and_its_state(
    cluster: LocalCluster, bucket: str
) -> None:
    cluster.s3_client().put_object(Bucket=bucket, Key="j/a.bin", Body=os.urandom(1000))
    root = new_mount_path()
    with Client(cluster.master_address) as rs:
        rs.mount(root, f"s3://{bucket}/j", endpoint_url=cluster.s3_endpoint)
        job = rs.watch_job(rs.submit_load(root).id)
    assert job.state == "completed", job.errors
    said = _one_line_error(_run("--master", cluster.master_address, "job", "cancel", job.id))
    assert f"job {job.id} already finished (completed at " in said
    assert "nothing to cancel" in said
    missing = uuid.uuid4().hex
    unknown = _run("--master", cluster.master_address, "job", "cancel", missing)
    assert _one_line_error(unknown) == f"reservoir: error: no load job '{missing}'"
