"""Log lines never mix with data: the CLI logs to stderr, the library only when asked.

A cluster whose worker1 is SIGKILLed but still listed (long lease): the first read of a
block homed on worker1 fails over to worker2, and the client logs that it did. (Later
reads go to worker2's replica first, so a test that needs the failover reads a file of
its own: `_unread`.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster

BLOCK = 64 * 1024
_UNREAD = ("cat", "json", "library")


@dataclass
class Degraded:
    cluster: LocalCluster
    path: str
    content: bytes
    unread: dict[str, bytes]  # name -> content of files that no test has read yet


@pytest.fixture(scope="module")
def degraded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Degraded]:
    cluster = LocalCluster.up(tmp_path_factory.mktemp("logging"), workers=2, lease_ttl=120)
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="logs")
        # 17 blocks each: some are homed on worker1.
        files = {name: os.urandom(16 * BLOCK + 123) for name in ("big", *_UNREAD)}
        for name, body in files.items():
            s3.put_object(Bucket="logs", Key=f"d/{name}.bin", Body=body)
        with Client(cluster.master_address) as c:
            c.mount("/logs", "s3://logs/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
        cluster.kill("worker1")
        yield Degraded(cluster, "/logs/big.bin", files.pop("big"), files)
    finally:
        cluster.down()


def _unread(d: Degraded, name: str) -> Degraded:
    """A file no worker holds yet: its blocks homed on worker1 are asked of worker1 first."""
    return Degraded(d.cluster, f"/logs/{name}.bin", d.unread.pop(name), {})


def _cli(
    d: Degraded, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RESERVOIR_LOG")}
    return subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "--master", d.cluster.master_address, *args],
        capture_output=True,
        timeout=60,
        env={**environ, **(env or {})},
    )


def test_cat_writes_exactly_the_file_to_stdout_and_logs_to_stderr_while_a_worker_is_down(
    degraded: Degraded,
) -> None:
    degraded = _unread(degraded, "cat")
    done = _cli(degraded, "cat", degraded.path, env={"RESERVOIR_LOG_LEVEL": "info"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == degraded.content
    assert b"worker_failed" in done.stderr and b"worker1" in done.stderr


def test_cli_logs_nothing_below_warning_by_default(degraded: Degraded) -> None:
    done = _cli(degraded, "cat", degraded.path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == degraded.content
    assert done.stderr == b""


def test_json_output_parses_and_log_lines_are_json_on_stderr_while_a_worker_is_down(
    degraded: Degraded,
) -> None:
    degraded = _unread(degraded, "json")
    env = {"RESERVOIR_LOG_LEVEL": "info", "RESERVOIR_LOG_FORMAT": "json"}
    stat = _cli(degraded, "--json", "stat", degraded.path, env=env)
    assert json.loads(stat.stdout)["size"] == len(degraded.content)
    cat = _cli(degraded, "cat", degraded.path, env=env)
    assert cat.stdout == degraded.content
    events = [json.loads(line) for line in cat.stderr.decode().splitlines()]
    failed = [e for e in events if e["event"] == "worker_failed"]
    assert failed and failed[0]["worker"] == "worker1" and failed[0]["level"] == "info"
    report = _cli(degraded, "--json", "report", degraded.path, env=env)
    assert json.loads(report.stdout)["files"] == 1
    assert json.loads(report.stdout)["unreachable_workers"] == ["worker1"]
    workers = {w["id"]: w for w in json.loads(_cli(degraded, "--json", "workers", "-l").stdout)}
    assert workers["worker1"]["reachable"] is False
    assert "tiers" in workers["worker2"]


def _script(d: Degraded, tmp_path: Path, setup: str) -> subprocess.CompletedProcess[bytes]:
    expected = tmp_path / "expected.bin"
    expected.write_bytes(d.content)
    script = tmp_path / "reader.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import logging, sys
            from pathlib import Path
            from reservoir.client import Client
            {setup}
            with Client({d.cluster.master_address!r}) as rs:
                data = rs.read({d.path!r})
            sys.exit(0 if data == Path({str(expected)!r}).read_bytes() else 3)
            """
        )
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RESERVOIR_LOG")}
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, timeout=60, env=environ
    )


def test_library_prints_nothing_when_the_application_configures_no_logging(
    degraded: Degraded, tmp_path: Path
) -> None:
    done = _script(degraded, tmp_path, setup="")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"" and done.stderr == b""


def test_library_events_with_their_fields_reach_an_application_that_configures_logging(
    degraded: Degraded, tmp_path: Path
) -> None:
    degraded = _unread(degraded, "library")
    done = _script(degraded, tmp_path, setup="logging.basicConfig(level=logging.INFO)")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b""
    lines = [line for line in done.stderr.decode().splitlines() if "worker_failed" in line]
    assert lines and "worker=worker1" in lines[0] and "reservoir.client" in lines[0]
