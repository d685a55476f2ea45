"""A `Client` crosses process boundaries the way DataLoader workers need: pickled as its
settings, and usable in forked and spawned children with channels of their own."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.conftest import new_mount_path, own_cluster_env

FILES = {f"f{i}.bin": bytes([i]) * (1000 * i + 7) for i in range(12)}


@pytest.fixture(scope="module")
def mounted(cluster: LocalCluster) -> str:
    bucket = "procs-" + os.urandom(4).hex()
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=bucket)
    for name, data in FILES.items():
        s3.put_object(Bucket=bucket, Key=f"d/{name}", Body=data)
    root = new_mount_path()
    with Client(cluster.master_address) as c:
        c.mount(root, f"s3://{bucket}/d/", endpoint_url=cluster.s3_endpoint)
    return root


def _read_all(client: Client, root: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out.put({name: client.read(f"{root}/{name}") for name in FILES})


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_children_read_byte_exact_through_the_parents_client(
    cluster: LocalCluster, mounted: str, start_method: str
) -> None:
    with Client(cluster.master_address) as parent:
        assert parent.read(f"{mounted}/f3.bin") == FILES["f3.bin"]  # channels open at the fork
        ctx = multiprocessing.get_context(start_method)
        results = ctx.Queue()
        children = [
            ctx.Process(target=_read_all, args=(parent, mounted, results)) for _ in range(2)
        ]
        for child in children:
            child.start()
        got = [results.get(timeout=60) for _ in children]
        for child in children:
            child.join(30)
            assert child.exitcode == 0
        assert got == [FILES, FILES]
        # The parent gave up its connections at the fork and makes new ones.
        assert parent.read(f"{mounted}/f5.bin") == FILES["f5.bin"]


def test_a_raw_fork_child_reads_without_hanging(cluster: LocalCluster, mounted: str) -> None:
    with Client(cluster.master_address) as parent:
        parent.read(f"{mounted}/f1.bin")
        pid = os.fork()
        if pid == 0:  # the child reports through its exit code
            ok = False
            try:
                ok = parent.read(f"{mounted}/f7.bin") == FILES["f7.bin"]
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def test_a_fork_child_reads_while_closed_channels_wait_in_reference_cycles(
    cluster: LocalCluster, mounted: str
) -> None:
    """grpc.aio keeps its poller thread while any channel object lives, closed or not; a
    child forked then would wait forever. The fork hook frees what cycles still hold."""
    with Client(cluster.master_address) as parent:
        parent.read(f"{mounted}/f1.bin")
        gc.disable()
        try:
            cycle: list[object] = [parent._runtime.client]
            cycle.append(cycle)
            del cycle
            pid = os.fork()
            if pid == 0:  # the child reports through its exit code; SIGALRM ends a hang
                ok = False
                try:
                    signal.alarm(20)
                    ok = parent.read(f"{mounted}/f7.bin") == FILES["f7.bin"]
                finally:
                    os._exit(0 if ok else 1)
        finally:
            gc.enable()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert parent.read(f"{mounted}/f2.bin") == FILES["f2.bin"]


def test_an_unpickled_client_has_the_same_settings_and_reads(
    cluster: LocalCluster, mounted: str
) -> None:
    with Client(cluster.master_address) as original:
        copy = pickle.loads(pickle.dumps(original))
        try:
            assert copy.config == original.config
            assert copy.read(f"{mounted}/f2.bin") == FILES["f2.bin"]
        finally:
            copy.close()
        # Closing the copy leaves the original alone.
        assert original.read(f"{mounted}/f2.bin") == FILES["f2.bin"]


def test_client_with_no_argument_finds_the_local_cluster(
    cluster: LocalCluster, mounted: str
) -> None:
    env = {**own_cluster_env(), "RESERVOIR_STATE_DIR": str(cluster.state_dir)}
    script = (
        "import sys\nfrom reservoir.client import Client\n"
        "with Client() as rs:\n"
        "    sys.stdout.buffer.write(rs.read(sys.argv[1]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, f"{mounted}/f4.bin"],
        env=env,
        capture_output=True,
        timeout=60,
        cwd=Path(__file__).parent,
    )
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout == FILES["f4.bin"]
