"""SIGTERM to a process that is writing a file through Reservoir (the CLI's `cp -`, the
SDK's `Client.open(path, "wb")`, an fsspec file) drops its upload at once, as Ctrl-C
does, instead of leaving it open in S3 until the master's abort timeout; a program with a
SIGTERM handler of its own keeps it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.conftest import new_mount_path
from tests.eventually import eventually

BLOCK = 1 << 20
# What "at once" promises a user (the master's own abort comes minutes later): a limit
# for the abort, not a measure of its speed.
ABORTED_WITHIN_S = 5.0

_SDK = """
import os, sys
from reservoir.client import Client

with Client() as rs, rs.open(sys.argv[1], "wb") as f:
    f.write(os.urandom(6 << 20))  # more than a part: one is on its way to S3
    print("writing", flush=True)
    sys.stdin.read()  # the rest of the training step, for as long as it takes
"""

_FSSPEC = """
import os, sys
import fsspec

f = fsspec.filesystem("reservoir").open("reservoir://" + sys.argv[1], "wb")
f.write(os.urandom(6 << 20))
print("writing", flush=True)
sys.stdin.read()
"""

# A program that handles SIGTERM itself: its handler stays, and its exit aborts the write.
_OWN_HANDLER = """
import os, signal, sys
from reservoir.client import Client

def stop(signum, frame):
    raise SystemExit(7)

signal.signal(signal.SIGTERM, stop)
with Client() as rs, rs.open(sys.argv[1], "wb") as f:
    f.write(os.urandom(6 << 20))
    print("writing", "kept" if signal.getsignal(signal.SIGTERM) is stop else "taken", flush=True)
    sys.stdin.read()
"""


def _open_uploads(cluster: LocalCluster, bucket: str) -> list[str]:
    listing = cluster.s3_client().list_multipart_uploads(Bucket=bucket)
    return [u["Key"] for u in listing.get("Uploads", [])]


def _writer(kind: str, path: str, master: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RESERVOIR_MASTER": master, "RESERVOIR_WRITE_PART_SIZE": "5MiB"}
    if kind == "cli":
        argv = [sys.executable, "-m", "reservoir.cli.main", "cp", "-", f"reservoir://{path}"]
    else:
        script = {"sdk": _SDK, "fsspec": _FSSPEC, "own handler": _OWN_HANDLER}[kind]
        argv = [sys.executable, "-c", script, path]
    return subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )


@pytest.mark.parametrize(
    ("kind", "exit_code"),
    [
        ("cli", -signal.SIGTERM),
        ("sdk", -signal.SIGTERM),
        ("fsspec", -signal.SIGTERM),
        ("own handler", 7),
    ],
)
def test_sigterm_to_a_writer_leaves_no_open_upload_in_s3_within_5_seconds(
    cluster: LocalCluster, bucket: str, kind: str, exit_code: int
) -> None:
    root = new_mount_path()
    with Client(cluster.master_address) as rs:
        rs.mount(
            root,
            f"s3://{bucket}/w/",
            endpoint_url=cluster.s3_endpoint,
            block_size=BLOCK,
            writable=True,
        )
    path = f"{root}/step-1/model.bin"
    writer = _writer(kind, path, cluster.master_address)
    assert writer.stdin is not None and writer.stdout is not None
    try:
        if kind == "cli":
            writer.stdin.write(os.urandom(3 << 20))  # cp waits for more: the upload is open
            writer.stdin.flush()
        else:
            first = writer.stdout.readline().decode().split()
            assert first[0] == "writing", writer.stderr.read() if writer.stderr else ""
            assert first[1:] in ([], ["kept"])
        eventually(lambda: _open_uploads(cluster, bucket) == ["w/step-1/model.bin"], timeout_s=30)
        writer.send_signal(signal.SIGTERM)
        eventually(lambda: _open_uploads(cluster, bucket) == [], timeout_s=ABORTED_WITHIN_S)
        # Not within the bound: a program that exits by SystemExit (as by Ctrl-C) first
        # joins the thread of a part upload still in flight, however long boto3 takes.
        assert writer.wait(timeout=60) == exit_code
        stderr = writer.stderr.read().decode() if writer.stderr else ""
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=10)
    assert "Traceback" not in stderr, stderr
    with Client(cluster.master_address) as rs, pytest.raises(FileNotFoundError):
        rs.stat(path)
