"""A webhdfs:// mount on a real cluster: a directory served by a WebHDFS server process (a
namenode redirecting to a datanode, as HDFS does), listed, loaded and read byte-exact
through the CLI and the SDK, cached by the workers, seen afresh when files change; and a
writable mount: a file saved in parts by the workers appears in HDFS whole on close,
renamed in place, removed with its directories."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client, discovery
from reservoir.local.cluster import LocalCluster
from tests.cli_runs import run_cli
from tests.conftest import LEASE_TTL_S, new_mount_path

from ..webhdfs_server import WebHdfsServer

BLOCK = 1 << 20
PART = 5 << 20  # the client's floor: three parts make an 11 MiB file


@pytest.fixture(scope="module")
def hdfs_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster whose operator allows webhdfs:// mounts (not allowed by default)."""
    c = LocalCluster.up(
        tmp_path_factory.mktemp("hdfs-cluster"),
        workers=2,
        lease_ttl=LEASE_TTL_S,
        env={"RESERVOIR_ALLOWED_SCHEMES": "s3,webhdfs"},
    )
    try:
        yield c
    finally:
        c.down()


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebHdfsServer]:
    server = WebHdfsServer(tmp_path_factory.mktemp("hdfs"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def data(hdfs: WebHdfsServer) -> Path:
    """A fresh directory HDFS serves."""
    directory = hdfs.root / f"data-{uuid.uuid4().hex[:8]}"
    directory.mkdir()
    return directory


def _mount(cluster: LocalCluster, hdfs: WebHdfsServer, data: Path, *options: str) -> str:
    root = new_mount_path()
    done = run_cli(
        cluster, "mount", root, hdfs.uri(f"{data.name}/"), "--credentials", "anonymous",
        "--block-size", "64KiB", *options,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root


def _datanode_opens(hdfs: WebHdfsServer, data: Path, name: str) -> int:
    path = f"/{data.name}/{name}"
    return sum(
        1
        for r in hdfs.requests()
        if r["node"] == "datanode" and r["op"] == "OPEN" and r["path"] == path
    )


def test_a_directory_is_listed_loaded_and_read_byte_exact_then_afresh_once_changed(
    hdfs_cluster: LocalCluster, hdfs: WebHdfsServer, data: Path
) -> None:
    payload = os.urandom(300_000)  # five 64 KiB blocks
    (data / "a.bin").write_bytes(payload)
    (data / "sub").mkdir()
    (data / "sub" / "hello.txt").write_text("hello over webhdfs\n")
    root = _mount(hdfs_cluster, hdfs, data, "--metadata-sync", "always")

    listed = run_cli(hdfs_cluster, "ls", root)
    assert listed.returncode == 0, listed.stderr
    assert "a.bin" in listed.stdout and "sub" in listed.stdout
    loaded = run_cli(hdfs_cluster, "--json", "load", root, "--wait")
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout)["state"] == "completed"
    fetched = _datanode_opens(hdfs, data, "a.bin")
    assert fetched >= 5  # one ranged OPEN per block at least

    assert run_cli(hdfs_cluster, "cat", f"{root}/sub/hello.txt").stdout == "hello over webhdfs\n"
    with Client(hdfs_cluster.master_address) as client:
        assert client.read(f"{root}/a.bin") == payload
    assert _datanode_opens(hdfs, data, "a.bin") == fetched  # read from the cache

    changed = os.urandom(200_000)  # another size, so another change token whatever the clock
    (data / "a.bin").write_bytes(changed)
    with Client(hdfs_cluster.master_address) as client:
        assert client.read(f"{root}/a.bin") == changed
    assert _datanode_opens(hdfs, data, "a.bin") > fetched


def test_a_file_added_in_hdfs_shows_up_after_load_metadata(
    hdfs_cluster: LocalCluster, hdfs: WebHdfsServer, data: Path
) -> None:
    (data / "first.bin").write_bytes(b"1" * 1000)
    root = _mount(hdfs_cluster, hdfs, data, "--metadata-sync", "never")
    assert "first.bin" in run_cli(hdfs_cluster, "ls", root).stdout
    (data / "second.bin").write_bytes(b"2" * 2000)
    synced = run_cli(hdfs_cluster, "load-metadata", root)
    assert synced.returncode == 0, synced.stderr
    assert "second.bin" in run_cli(hdfs_cluster, "ls", root).stdout
    with Client(hdfs_cluster.master_address) as client:
        assert client.read(f"{root}/second.bin") == b"2" * 2000


def test_a_missing_file_is_not_found(
    hdfs_cluster: LocalCluster, hdfs: WebHdfsServer, data: Path
) -> None:
    root = _mount(hdfs_cluster, hdfs, data)
    with Client(hdfs_cluster.master_address) as client, pytest.raises(FileNotFoundError):
        client.read(f"{root}/no-such.bin")
    missing = run_cli(hdfs_cluster, "cat", f"{root}/no-such.bin")
    assert missing.returncode != 0 and "no-such.bin" in missing.stderr


def test_a_mount_of_a_namenode_not_allowed_by_scheme_is_refused(
    hdfs_cluster: LocalCluster, hdfs: WebHdfsServer, data: Path
) -> None:
    done = run_cli(
        hdfs_cluster, "mount", new_mount_path(), hdfs.uri(f"{data.name}/", scheme="hdfs"),
        "--credentials", "anonymous",
    )  # fmt: skip
    assert done.returncode != 0 and "RESERVOIR_ALLOWED_SCHEMES" in done.stderr


@pytest.fixture
def writer(hdfs_cluster: LocalCluster) -> Iterator[Client]:
    """A client whose writes go in 5 MiB parts (the client's floor)."""
    config = discovery.client_config(hdfs_cluster.master_address)
    with Client(config=dataclasses.replace(config, write_part_size=PART)) as c:
        yield c


def _writable(writer: Client, hdfs: WebHdfsServer, data: Path) -> str:
    root = new_mount_path()
    uri = hdfs.uri(f"{data.name}/")
    writer.mount(root, uri, credentials="anonymous", block_size=BLOCK, writable=True)
    return root


def test_a_file_saved_in_parts_by_the_workers_appears_in_hdfs_whole_on_close(
    writer: Client, hdfs: WebHdfsServer, data: Path
) -> None:
    root = _writable(writer, hdfs, data)
    saved = os.urandom(11 * BLOCK + 7)  # three parts, each uploaded by a worker
    with writer.open(f"{root}/ckpt/step-1.pt", "wb") as f:
        f.write(saved)
        assert not (data / "ckpt" / "step-1.pt").exists()  # published on close only
    assert (data / "ckpt" / "step-1.pt").read_bytes() == saved
    assert writer.read(f"{root}/ckpt/step-1.pt") == saved
    assert list((data / ".reservoir-uploads").iterdir()) == []  # nothing left behind
    assert [e.path for e in writer.ls(root)] == [f"{root}/ckpt"]  # nor shown
    below = [r for r in hdfs.requests() if r["path"].startswith(f"/{data.name}/")]
    assert sum(r["op"] == "CONCAT" for r in below) == 1
    assert sum(r["op"] == "CREATE" and r["node"] == "datanode" for r in below) >= 4


def test_a_rename_moves_the_file_in_place_and_rm_takes_its_directories(
    writer: Client, hdfs: WebHdfsServer, data: Path, hdfs_cluster: LocalCluster
) -> None:
    root = _writable(writer, hdfs, data)
    writer.write(f"{root}/step-2/.metadata.tmp", b"commit")
    moved = run_cli(hdfs_cluster, "mv", f"{root}/step-2/.metadata.tmp", f"{root}/step-2/.metadata")
    assert moved.returncode == 0, moved.stderr
    assert sorted(p.name for p in (data / "step-2").iterdir()) == [".metadata"]
    with Client(hdfs_cluster.master_address) as reader:
        assert reader.read(f"{root}/step-2/.metadata") == b"commit"
    writer.rm(f"{root}/step-2", recursive=True)
    assert not (data / "step-2").exists()
