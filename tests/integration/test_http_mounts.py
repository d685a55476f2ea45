"""An http:// mount on a real cluster: files under a URL prefix on a plain file server
process, read by path through the CLI and the SDK, cached by the workers, seen afresh
when they change; the mount cannot be listed, and `load` takes a list of files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.cli_runs import run_cli
from tests.conftest import LEASE_TTL_S, new_mount_path

from ..http_files import HttpFiles


@pytest.fixture(scope="module")
def web_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster whose operator allows http:// mounts (not allowed by default)."""
    c = LocalCluster.up(
        tmp_path_factory.mktemp("web-cluster"),
        workers=2,
        lease_ttl=LEASE_TTL_S,
        env={"RESERVOIR_ALLOWED_SCHEMES": "s3,http"},
    )
    try:
        yield c
    finally:
        c.down()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpFiles]:
    server = HttpFiles(tmp_path_factory.mktemp("served"))
    try:
        yield server
    finally:
        server.stop()


def _mount(cluster: LocalCluster, server: HttpFiles, *options: str) -> str:
    root = new_mount_path()
    done = run_cli(
        cluster, "mount", root, server.url, "--credentials", "anonymous", "--block-size", "64KiB",
        *options,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root


def test_a_file_is_read_byte_exact_then_from_the_cache_and_afresh_once_changed(
    web_cluster: LocalCluster, served: HttpFiles
) -> None:
    payload = os.urandom(300_000)  # five 64 KiB blocks
    (served.directory / "a.bin").write_bytes(payload)
    (served.directory / "hello.txt").write_text("hello over http\n")
    root = _mount(web_cluster, served, "--metadata-sync", "always")

    assert run_cli(web_cluster, "cat", f"{root}/hello.txt").stdout == "hello over http\n"
    with Client(web_cluster.master_address) as client:
        assert client.read(f"{root}/a.bin") == payload
    fetched = served.gets("a.bin")
    assert fetched >= 5  # one ranged GET per block at least
    with Client(web_cluster.master_address) as client:
        assert client.read(f"{root}/a.bin") == payload
    assert served.gets("a.bin") == fetched  # the second read never reached the server

    changed = os.urandom(200_000)  # another size, so another change token whatever the clock
    (served.directory / "a.bin").write_bytes(changed)
    with Client(web_cluster.master_address) as client:
        assert client.read(f"{root}/a.bin") == changed
    assert served.gets("a.bin") > fetched


def test_a_missing_file_is_not_found_and_listing_is_refused_with_the_reason(
    web_cluster: LocalCluster, served: HttpFiles
) -> None:
    root = _mount(web_cluster, served)
    with Client(web_cluster.master_address) as client, pytest.raises(FileNotFoundError):
        client.read(f"{root}/no-such.bin")
    missing = run_cli(web_cluster, "cat", f"{root}/no-such.bin")
    assert missing.returncode != 0 and "no-such.bin" in missing.stderr
    listed = run_cli(web_cluster, "ls", root)
    assert listed.returncode != 0
    assert "HTTP has no listing" in listed.stderr and listed.stdout == ""


def test_a_writable_http_mount_is_refused(web_cluster: LocalCluster, served: HttpFiles) -> None:
    done = run_cli(
        web_cluster, "mount", new_mount_path(), served.url, "--credentials", "anonymous",
        "--writable",
    )  # fmt: skip
    assert done.returncode != 0 and "a http:// mount cannot be writable" in done.stderr


def test_load_with_a_list_of_files_absolute_or_relative_to_the_mount_caches_them_all(
    web_cluster: LocalCluster, served: HttpFiles, tmp_path: Path
) -> None:
    names = [f"shard-{i}.bin" for i in range(4)]
    payloads = {name: os.urandom(100_000) for name in names}
    for name, data in payloads.items():
        (served.directory / name).write_bytes(data)
    root = _mount(web_cluster, served)
    # An empty list is refused: no list at all would mean every file below the path.
    empty = run_cli(web_cluster, "load", root, "--files-from", "-", "--wait", stdin="\n \n")
    assert empty.returncode == 1 and "lists no files" in empty.stderr
    assert not any(served.gets(name) for name in names)
    # A mirror's manifest names its files from its root; a list may also name them whole.
    listing = "\n".join([f"{root}/{names[0]}", *names[1:]]) + "\n"
    done = run_cli(
        web_cluster, "--json", "load", root, "--files-from", "-", "--wait", stdin=listing
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "completed"
    loaded = {name: served.gets(name) for name in names}
    assert all(count >= 2 for count in loaded.values())  # two 64 KiB blocks each
    with Client(web_cluster.master_address) as client:
        for name, data in payloads.items():
            assert client.read(f"{root}/{name}") == data
    assert {name: served.gets(name) for name in names} == loaded
