"""A writable file:// mount on a real cluster: the write path (the master opens and
publishes the upload, the workers upload its parts) is the store interface's, so a
directory on a shared file system takes checkpoints as S3 does: saved whole on close,
read back from the cache, renamed in place, removed with its directories."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client, discovery
from reservoir.local.cluster import LocalCluster
from tests.cli_runs import run_cli
from tests.conftest import LEASE_TTL_S, new_mount_path

BLOCK = 1 << 20
PART = 5 << 20  # the client's floor (S3's): three parts make an 11 MiB file


@pytest.fixture(scope="module")
def file_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster whose operator allows file:// mounts (not allowed by default)."""
    c = LocalCluster.up(
        tmp_path_factory.mktemp("file-cluster"),
        workers=2,
        lease_ttl=LEASE_TTL_S,
        env={"RESERVOIR_ALLOWED_SCHEMES": "s3,file"},
    )
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def writer(file_cluster: LocalCluster) -> Iterator[Client]:
    config = discovery.client_config(file_cluster.master_address)
    with Client(config=dataclasses.replace(config, write_part_size=PART)) as c:
        yield c


def _mount(client: Client, directory: Path) -> str:
    root = new_mount_path()
    client.mount(root, f"file://{directory}/", block_size=BLOCK, writable=True)
    return root


def test_a_file_saved_in_parts_by_the_workers_lands_whole_in_the_directory(
    writer: Client, tmp_path: Path
) -> None:
    root = _mount(writer, tmp_path)
    data = os.urandom(11 * BLOCK + 7)  # three parts, each uploaded by a worker
    with writer.open(f"{root}/run/model.pt", "wb") as f:
        f.write(data)
        assert not (tmp_path / "run" / "model.pt").exists()  # published on close only
    assert (tmp_path / "run" / "model.pt").read_bytes() == data
    assert writer.read(f"{root}/run/model.pt") == data
    uploads = tmp_path / ".reservoir-uploads"
    assert [p for p in uploads.iterdir() if p.name != "tmp"] == []  # no upload left behind
    assert [e.path for e in writer.ls(root)] == [f"{root}/run"]  # nor shown


def test_rename_moves_the_file_in_place_and_rm_takes_its_directories(
    writer: Client, tmp_path: Path, file_cluster: LocalCluster
) -> None:
    root = _mount(writer, tmp_path)
    writer.makedirs(f"{root}/step-1")
    assert (tmp_path / "step-1").is_dir()
    writer.write(f"{root}/step-1/.metadata.tmp", b"commit")
    moved = run_cli(file_cluster, "mv", f"{root}/step-1/.metadata.tmp", f"{root}/step-1/.metadata")
    assert moved.returncode == 0, moved.stderr
    assert sorted(p.name for p in (tmp_path / "step-1").iterdir()) == [".metadata"]
    with Client(file_cluster.master_address) as reader:
        assert reader.read(f"{root}/step-1/.metadata") == b"commit"
    writer.rm(f"{root}/step-1", recursive=True)
    assert not (tmp_path / "step-1").exists()


def test_a_small_file_written_whole_keeps_the_directory_atomic(
    writer: Client, tmp_path: Path
) -> None:
    """A file written in one part goes up as one PUT (by a worker): the directory never
    shows a partial file, and an overwrite replaces the file whole."""
    root = _mount(writer, tmp_path)
    writer.write(f"{root}/a.json", b'{"v": 1}')
    writer.write(f"{root}/a.json", b'{"v": 2, "longer": true}')
    assert (tmp_path / "a.json").read_bytes() == b'{"v": 2, "longer": true}'
    assert writer.read(f"{root}/a.json") == b'{"v": 2, "longer": true}'
