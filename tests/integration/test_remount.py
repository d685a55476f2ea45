"""A remount (same path, a second S3 server) reaches every worker's next read; when that
server goes away, errors say which endpoint failed."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster, free_port
from tests.conftest import new_mount_path
from tests.eventually import eventually

BLOCK = 64 * 1024
BUCKET = "remount"


@pytest.fixture
def second_s3(tmp_path: Path) -> Iterator[LocalCluster]:
    """A second S3-compatible server process, started the way LocalCluster starts its own."""
    other = LocalCluster(state_dir=tmp_path / "s3b")
    other.state_dir.mkdir()
    other.start_s3()
    try:
        yield other
    finally:
        other.down()


def _fill(s3_server: LocalCluster, files: dict[str, bytes]) -> None:
    s3 = s3_server.s3_client()
    if BUCKET not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=BUCKET)
    for name, data in files.items():
        s3.put_object(Bucket=BUCKET, Key=f"d/{name}", Body=data)


def test_a_remount_to_another_endpoint_reaches_every_worker_and_errors_name_the_endpoint(
    cluster: LocalCluster, second_s3: LocalCluster
) -> None:
    # The same keys on both servers, different bytes; each worker fetches some of them.
    names = [f"f{i}.bin" for i in range(30)]
    on_a = {n: os.urandom(BLOCK + i) for i, n in enumerate(names)}  # 2 blocks each
    on_b = {n: os.urandom(BLOCK + i) for i, n in enumerate(names)}
    on_b["only_b.bin"] = os.urandom(3 * BLOCK)
    cold = os.urandom(2 * BLOCK)  # stat'ed, never read
    _fill(cluster, on_a)
    _fill(second_s3, {**on_b, "cold.bin": cold})
    root = new_mount_path()
    uri = f"s3://{BUCKET}/d/"
    with Client(cluster.master_address) as c:
        c.mount(root, uri, endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
        gets = {s.worker_id: s.ufs_gets for s in c.worker_stats()}
        assert c.read_many([f"{root}/{n}" for n in names]) == [on_a[n] for n in names]
        # 60 blocks over 3 workers: every worker has opened the mount's store.
        assert all(s.ufs_gets > gets[s.worker_id] for s in c.worker_stats())
        # A replacement that cannot be reached is refused, naming it; the mount stays.
        dead = f"http://127.0.0.1:{free_port()}"
        with pytest.raises(ConnectionError, match=f"endpoint {dead}"):
            c.mount(root, uri, endpoint_url=dead, block_size=BLOCK, replace=True)
        assert [m.options.endpoint_url for m in c.mounts() if m.path == root] == [
            cluster.s3_endpoint
        ]
        c.mount(root, uri, endpoint_url=second_s3.s3_endpoint, block_size=BLOCK, replace=True)
    before_a = cluster.s3_counts().get("GET", 0)
    with Client(cluster.master_address) as c:
        assert sorted(e.path.rsplit("/", 1)[1] for e in c.ls(root)) == sorted([*on_b, "cold.bin"])
        for name, data in on_b.items():
            assert c.read(f"{root}/{name}") == data
        assert c.read_many([f"{root}/{n}" for n in names]) == [on_b[n] for n in names]
        assert c.stat(f"{root}/cold.bin").size == len(cold)
    assert cluster.s3_counts().get("GET", 0) == before_a  # nothing read from the old server
    # Every worker learnt of the remount from its etcd watch, not by asking the master.
    for name in cluster.worker_names():
        log = Path(cluster.processes[name].log).read_text().splitlines()
        assert any(
            "mount_changed" in line
            and second_s3.s3_endpoint in line
            and root in line
            and '"source": "watch"' in line
            for line in log
        ), name

    # The new endpoint goes away: errors name it, whether the master or a reader meets it.
    second_s3.down()
    endpoint = second_s3.s3_endpoint
    with Client(cluster.master_address) as c:
        with pytest.raises(ConnectionError, match=f"endpoint {endpoint}"):
            c.stat(f"{root}/sub/never_seen.bin")  # below no listed directory: a LIST of it
        with pytest.raises(ConnectionError, match=f"endpoint {endpoint}"):
            c.read(f"{root}/cold.bin")  # known to the master, cached nowhere


def _worker_saw_remount(
    cluster: LocalCluster, name: str, endpoint: str, root: str, any_source: bool = False
) -> bool:
    lines = Path(cluster.processes[name].log).read_text().splitlines()
    return any(
        "mount_changed" in x
        and endpoint in x
        and root in x
        and (any_source or '"source": "master"' not in x)
        for x in lines
    )


def _watch_followed_again(cluster: LocalCluster, name: str) -> bool:
    lines = Path(cluster.processes[name].log).read_text().splitlines()
    broken = [i for i, x in enumerate(lines) if "mount_watch_broken" in x]
    return bool(broken) and any("mount_following" in x for x in lines[broken[0] + 1 :])


def test_workers_follow_remounts_again_after_an_etcd_restart(
    own_cluster: LocalCluster, second_s3: LocalCluster
) -> None:
    old, new = os.urandom(BLOCK + 5), os.urandom(BLOCK + 9)
    _fill(own_cluster, {"x.bin": old})
    _fill(second_s3, {"x.bin": new})
    root = new_mount_path()
    uri = f"s3://{BUCKET}/d/"
    with Client(own_cluster.master_address) as c:
        c.mount(root, uri, endpoint_url=own_cluster.s3_endpoint, block_size=BLOCK)
        assert c.read(f"{root}/x.bin") == old
    own_cluster.stop("etcd")
    own_cluster.restart_etcd()

    def remounted() -> bool:
        with Client(own_cluster.master_address) as c:
            c.mount(root, uri, endpoint_url=second_s3.s3_endpoint, block_size=BLOCK, replace=True)
        return True

    # The master's own etcd client reconnects first.
    eventually(remounted, interval_s=0.5, what="a remount once etcd is back")
    with Client(own_cluster.master_address) as c:
        assert c.read(f"{root}/x.bin") == new

    # Each worker has the new mount, and its watch came back on its own after the break
    # (a worker may hear of the remount from the master's recheck first, when its read
    # races the watch's reconnection).
    def followed(name: str) -> bool:
        return _worker_saw_remount(
            own_cluster, name, second_s3.s3_endpoint, root, any_source=True
        ) and _watch_followed_again(own_cluster, name)

    for name in own_cluster.worker_names():
        eventually(
            functools.partial(followed, name),
            timeout_s=20,
            interval_s=0.2,
            what=f"{name} following the mounts again",
        )
