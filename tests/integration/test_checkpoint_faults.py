"""Checkpoint saves meeting failures on a cluster of their own (2 workers, writes aborted
5 s after their writer goes quiet): a writer SIGKILLed mid-file leaves nothing visible and
no multipart upload behind; a worker SIGKILLed mid-save does not lose or half-publish
the file."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client, discovery
from reservoir.local.cluster import LocalCluster
from tests.conftest import LEASE_TTL_S
from tests.eventually import eventually

BLOCK = 1 << 20
PART = 5 << 20


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster.up(
        tmp_path_factory.mktemp("ckpt-faults"),
        workers=2,
        lease_ttl=LEASE_TTL_S,
        env={"RESERVOIR_WRITE_ABORT_TIMEOUT": "5s"},
    )
    try:
        yield c
    finally:
        c.down()


@pytest.fixture(scope="module")
def root(faulty: LocalCluster) -> str:
    bucket = f"f-{uuid.uuid4().hex[:12]}"
    faulty.s3_client().create_bucket(Bucket=bucket)
    with Client(faulty.master_address) as c:
        c.mount(
            "/ckpt",
            f"s3://{bucket}/run/",
            endpoint_url=faulty.s3_endpoint,
            block_size=BLOCK,
            writable=True,
        )
    return bucket


def _uploads(cluster: LocalCluster, bucket: str) -> list[object]:
    return list(cluster.s3_client().list_multipart_uploads(Bucket=bucket).get("Uploads", []))


_WRITER = textwrap.dedent(
    """
    import dataclasses, os, sys, time
    from reservoir.client import Client, discovery
    config = dataclasses.replace(
        discovery.client_config(sys.argv[1]), write_part_size=5 << 20
    )
    with Client(config=config) as rs:
        f = rs.open("/ckpt/killed.pt", "wb")
        f.write(os.urandom(6 << 20))  # one part sent, the rest still buffered
        while not f._pending or not all(p.done() for p in f._pending):
            time.sleep(0.05)
        print("part sent", flush=True)
        time.sleep(600)
    """
)


def test_a_writer_killed_mid_file_leaves_nothing_and_its_upload_is_aborted(
    faulty: LocalCluster, root: str, tmp_path: Path
) -> None:
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), faulty.master_address],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # A part is in S3, in an upload the master opened: it must not outlive the writer.
        assert proc.stdout is not None and proc.stdout.readline().strip() == "part sent"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # No keep-alive comes any more: the master drops the upload after its timeout.
    eventually(lambda: _uploads(faulty, root) == [], timeout_s=30, what="the upload aborted")
    with Client(faulty.master_address) as reader, pytest.raises(FileNotFoundError):
        reader.stat("/ckpt/killed.pt")
    assert faulty.s3_client().list_objects_v2(Bucket=root).get("KeyCount") == 0


def test_a_worker_killed_mid_save_neither_loses_nor_half_publishes_the_file(
    faulty: LocalCluster, root: str
) -> None:
    config = dataclasses.replace(
        discovery.client_config(faulty.master_address), write_part_size=PART
    )
    data = os.urandom(12 * BLOCK + 99)
    with Client(config=config) as writer:
        f = writer.open("/ckpt/survivor.pt", "wb")
        f.write(data[: 6 * BLOCK])
        with Client(faulty.master_address) as reader, pytest.raises(FileNotFoundError):
            reader.stat("/ckpt/survivor.pt")
        faulty.kill("worker1")
        f.write(data[6 * BLOCK :])
        f.close()
    with Client(faulty.master_address) as reader:
        # Blocks staged on the dead worker come from the store; every byte is right.
        assert reader.read("/ckpt/survivor.pt") == data
    assert _uploads(faulty, root) == []
    obj = faulty.s3_client().get_object(Bucket=root, Key="run/survivor.pt")
    assert obj["Body"].read() == data
