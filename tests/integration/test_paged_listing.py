"""A directory larger than a page, listed through every interface against a real cluster
(etcd, S3, master, workers as processes): the SDK's iter_ls and ls, the raw RPC, the CLI's
`ls`, fsspec's ls, find and walk. Pages of 7 entries over 50 files and a subdirectory, so
every listing crosses several pages (FUSE's readdir: tests/integration/test_fuse.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import grpc
import pytest

from reservoir.client import Client
from reservoir.client.filesystem import ReservoirFileSystem
from reservoir.common import config as cfg
from reservoir.common.errors import InvalidArgument
from reservoir.local.cluster import LocalCluster
from reservoir.v1 import master_pb2, master_pb2_grpc
from tests.conftest import channel, new_mount_path

PAGE = 7
FILES = [f"f{i:02d}.bin" for i in range(50)]
SUB = ["x.bin", "y.bin"]
NAMES = sorted([*FILES, "sub"])  # what the directory lists


@dataclasses.dataclass(frozen=True)
class Listed:
    cluster: LocalCluster
    root: str


@pytest.fixture(scope="module")
def listed(cluster: LocalCluster) -> Listed:
    bucket = f"pages-{os.getpid()}"
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=bucket)
    for name in FILES:
        s3.put_object(Bucket=bucket, Key=f"d/{name}", Body=name.encode())
    for name in SUB:
        s3.put_object(Bucket=bucket, Key=f"d/sub/{name}", Body=b"s")
    root = new_mount_path()
    with Client(cluster.master_address) as c:
        c.mount(root, f"s3://{bucket}/d/", endpoint_url=cluster.s3_endpoint)
    return Listed(cluster, root)


@pytest.fixture
def paged(listed: Listed) -> Iterator[Client]:
    """A client that asks for pages of PAGE entries."""
    config = dataclasses.replace(
        cfg.load(cfg.ClientConfig), master=listed.cluster.master_address, list_page_size=PAGE
    )
    with Client(config=config) as c:
        yield c


def _name(path: str) -> str:
    return path.rsplit("/", 1)[1]


def test_the_master_answers_a_page_at_a_time_with_a_token_for_the_next(listed: Listed) -> None:
    stub = master_pb2_grpc.MasterServiceStub(channel(listed.cluster.master_address))
    token, pages = "", []
    while True:
        response = stub.ListDirectory(
            master_pb2.ListDirectoryRequest(path=listed.root, page_size=PAGE, page_token=token),
            timeout=10,
        )
        pages.append([_name(e.path) for e in response.entries])
        token = response.next_page_token
        if not token:
            break
    assert [len(p) for p in pages] == [PAGE] * 7 + [2]
    assert [n for p in pages for n in p] == NAMES
    for bad in (
        master_pb2.ListDirectoryRequest(path=listed.root, page_token="garbage"),
        master_pb2.ListDirectoryRequest(path=listed.root, page_size=10_001),
    ):
        with pytest.raises(grpc.RpcError) as refused:
            stub.ListDirectory(bad, timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_sdk_iter_ls_streams_every_entry_once_in_name_order(listed: Listed, paged: Client) -> None:
    entries = paged.iter_ls(listed.root)
    first = next(entries)
    assert _name(first.path) == NAMES[0] and first.size == len(NAMES[0])
    rest = [_name(e.path) for e in entries]
    assert [_name(first.path), *rest] == NAMES
    assert [_name(e.path) for e in paged.ls(listed.root)] == NAMES
    assert [_name(e.path) for e in paged.iter_ls(listed.root, page_size=3)] == NAMES
    with pytest.raises(InvalidArgument, match="RESERVOIR_LIST_MAX_PAGE_SIZE"):
        list(paged.iter_ls(listed.root, page_size=10_001))
    with pytest.raises(NotADirectoryError):
        list(paged.iter_ls(f"{listed.root}/{FILES[0]}"))


def test_sdk_iter_ls_after_a_name_yields_only_the_names_sorting_after_it(
    listed: Listed, paged: Client
) -> None:
    after = NAMES[20]
    assert [_name(e.path) for e in paged.iter_ls(listed.root, start_after=after)] == NAMES[21:]
    pages = paged.iter_ls(listed.root, page_size=3, start_after="f3")  # between two names
    assert [_name(e.path) for e in pages] == [n for n in NAMES if n > "f3"]
    assert list(paged.iter_ls(listed.root, start_after=NAMES[-1])) == []
    with pytest.raises(NotADirectoryError):
        list(paged.iter_ls(f"{listed.root}/{FILES[0]}", start_after="a"))


def _cli(listed: Listed, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "--master", listed.cluster.master_address]
        + list(args),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RESERVOIR_LIST_PAGE_SIZE": str(PAGE)},
    )
    assert done.returncode == 0, done.stderr
    return done


def test_cli_ls_prints_every_page_one_table_one_json_array(listed: Listed) -> None:
    plain = _cli(listed, "ls", listed.root).stdout.splitlines()
    assert plain == [n + "/" if n == "sub" else n for n in NAMES]
    long = _cli(listed, "ls", "-l", listed.root).stdout.splitlines()
    assert long[0].split() == ["TYPE", "SIZE", "MODIFIED", "NAME"]
    assert len(long) == 1 + len(NAMES)  # one header for all the pages
    # Printed a page at a time, yet one table: every name starts in the same column.
    assert {line.index(line.split()[-1]) for line in long} == {long[0].index("NAME")}
    listing = json.loads(_cli(listed, "--json", "ls", listed.root).stdout)
    assert [_name(e["path"]) for e in listing] == NAMES
    assert listing[0]["type"] == "file" and listing[-1]["type"] == "directory"


def test_fsspec_ls_find_and_walk_see_every_entry_across_pages(
    listed: Listed, paged: Client
) -> None:
    fs = ReservoirFileSystem(client=paged, skip_instance_cache=True)
    root = listed.root
    assert fs.ls(root, detail=False) == [f"{root}/{n}" for n in NAMES]
    files = [f"{root}/{n}" for n in FILES] + [f"{root}/sub/{n}" for n in SUB]
    assert fs.find(root) == sorted(files)
    walked = list(fs.walk(root))
    assert [top for top, _, _ in walked] == [root, f"{root}/sub"]
    assert walked[0][1] == ["sub"] and walked[0][2] == FILES
    assert walked[1][1:] == ([], SUB)
