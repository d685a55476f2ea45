"""One contract for every UnderStore backend: file:// on a temp dir, s3:// against the
local S3-compatible server process, http:// against a file server process (read part
only: it cannot list or write, so its objects are written into the directory it serves),
webhdfs:// against a WebHDFS server process."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from reservoir.common.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from reservoir.common.understore.mounted_stores import open_under_store
from reservoir.common.understore.under_store import UnderStore, UnderStoreSettings

from ..http_files import HttpFiles
from .under_stores import LISTABLE, READABLE, Put, opened


@pytest.fixture(params=READABLE)
def readable(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[UnderStore, Put]:
    """Every store, and how to put an object in it."""
    return opened(request, tmp_path)


@pytest.fixture(params=LISTABLE)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> UnderStore:
    """Every store that lists and writes."""
    return opened(request, tmp_path)[0]


def test_put_then_head_reports_size_and_a_stable_etag(readable: tuple[UnderStore, Put]) -> None:
    store, put = readable
    info = put("a/b.bin", b"x" * 1000)
    head = store.head("a/b.bin")
    assert head.size == 1000 and head.etag == info.etag and head.etag


def test_head_of_a_missing_key_is_not_found(readable: tuple[UnderStore, Put]) -> None:
    with pytest.raises(NotFound):
        readable[0].head("nope")


def test_get_range_returns_exact_bytes_and_clips_at_the_end(
    readable: tuple[UnderStore, Put],
) -> None:
    store, put = readable
    data = os.urandom(5000)
    info = put("r.bin", data)
    assert store.get_range("r.bin", 0, 5000, info.etag) == data
    assert store.get_range("r.bin", 4990, 10) == data[4990:]
    assert store.get_range("r.bin", 4990, 100) == data[4990:]
    assert store.get_range("r.bin", 100, 0) == b""


def test_get_range_with_a_stale_etag_is_a_conflict(readable: tuple[UnderStore, Put]) -> None:
    store, put = readable
    old = put("v.bin", b"old")
    put("v.bin", b"newer content")
    with pytest.raises(Conflict):
        store.get_range("v.bin", 0, 3, old.etag)


def test_an_awaited_get_range_returns_exact_bytes_and_clips_at_the_end(
    readable: tuple[UnderStore, Put],
) -> None:
    store, put = readable
    data = os.urandom(5000)
    info = put("r.bin", data)

    async def reads() -> list[bytes]:
        return [
            await store.get_range_async("r.bin", 0, 5000, info.etag),
            await store.get_range_async("r.bin", 4990, 10),
            await store.get_range_async("r.bin", 1000, 3000, info.etag),
            await store.get_range_async("r.bin", 100, 0),
        ]

    assert asyncio.run(reads()) == [data, data[4990:], data[1000:4000], b""]


def test_an_awaited_get_range_with_a_stale_etag_is_a_conflict(
    readable: tuple[UnderStore, Put],
) -> None:
    store, put = readable
    old = put("v.bin", b"old")
    put("v.bin", b"newer content")
    with pytest.raises(Conflict):
        asyncio.run(store.get_range_async("v.bin", 0, 3, old.etag))


def test_an_awaited_get_range_of_a_missing_key_is_not_found(
    readable: tuple[UnderStore, Put],
) -> None:
    with pytest.raises(NotFound):
        asyncio.run(readable[0].get_range_async("nope", 0, 10))


def test_a_get_range_into_a_buffer_fills_it_byte_exactly_and_clips_at_the_end(
    readable: tuple[UnderStore, Put],
) -> None:
    store, put = readable
    data = os.urandom(300_000)
    info = put("into.bin", data)

    async def reads() -> list[tuple[int, bytes]]:
        answers = []
        for offset, length, etag in [
            (0, 300_000, info.etag),
            (1000, 200_000, ""),
            (299_990, 100, info.etag),
            (5, 0, ""),
        ]:
            buffer = bytearray(b"\xee" * (length + 7))
            view = memoryview(buffer)[:length]
            got = await store.get_range_into("into.bin", offset, view, etag)
            assert buffer[length:] == b"\xee" * 7  # nothing past the buffer given
            answers.append((got, bytes(buffer[:got])))
        return answers

    assert asyncio.run(reads()) == [
        (300_000, data),
        (200_000, data[1000:201_000]),
        (10, data[299_990:]),
        (0, b""),
    ]


def test_a_get_range_into_a_buffer_with_a_stale_etag_is_a_conflict(
    readable: tuple[UnderStore, Put],
) -> None:
    store, put = readable
    old = put("v.bin", b"old")
    put("v.bin", b"newer content")
    with pytest.raises(Conflict):
        asyncio.run(store.get_range_into("v.bin", 0, memoryview(bytearray(3)), old.etag))


def test_a_get_range_into_a_buffer_of_a_missing_key_is_not_found(
    readable: tuple[UnderStore, Put],
) -> None:
    with pytest.raises(NotFound):
        asyncio.run(readable[0].get_range_into("nope", 0, memoryview(bytearray(10))))


def test_list_shows_one_level_of_objects_and_prefixes(store: UnderStore) -> None:
    store.put("d/x.txt", b"1")
    store.put("d/y.txt", b"22")
    store.put("d/sub/z.txt", b"333")
    listing = store.list("d/")
    assert sorted(o.key for o in listing.objects) == ["d/x.txt", "d/y.txt"]
    assert listing.prefixes == ["d/sub"]
    assert store.list("missing/").objects == []


def test_a_bounded_list_stops_at_the_bound_and_says_it_is_incomplete(store: UnderStore) -> None:
    for name in ("a", "b", "c"):
        store.put(f"d/{name}.txt", b"1")
    store.put("d/sub/z.txt", b"2")
    bounded = store.list("d/", limit=2)
    assert not bounded.complete
    assert 2 <= len(bounded.objects) + len(bounded.prefixes) < 4
    whole = store.list("d/", limit=4)
    assert whole.complete and len(whole.objects) == 3 and whole.prefixes == ["d/sub"]
    assert store.list("d/").complete


def test_walk_lists_every_key_below_a_prefix_at_any_depth_in_key_order(
    store: UnderStore,
) -> None:
    # "d/b-x" sorts before the keys below "d/b/", "d/b0" after them.
    keys = ["d/b-x", "d/b/1.bin", "d/b/c/deep.bin", "d/b0", "d/z.bin", "e/out.bin"]
    for key in keys:
        store.put(key, key.encode())
    walked = [(o.key, o.size) for page in store.walk("d/") for o in page]
    below = [k for k in keys if k.startswith("d/")]
    assert walked == [(k, len(k)) for k in below]
    assert [o.key for page in store.walk("") for o in page] == keys


def test_uri_and_key_are_inverse(readable: tuple[UnderStore, Put]) -> None:
    store = readable[0]
    assert store.key_of(store.uri_of("a/b")) == "a/b"


def test_check_passes_for_a_readable_store(readable: tuple[UnderStore, Put]) -> None:
    readable[0].check()


# ---- http(s): read-only, no listing ------------------------------------------------------


@pytest.fixture
def http_store(http_files: HttpFiles) -> UnderStore:
    return open_under_store(http_files.url, UnderStoreSettings(credentials="anonymous"))


def test_an_http_store_refuses_to_list_and_says_why(http_store: UnderStore) -> None:
    with pytest.raises(InvalidArgument, match="HTTP has no listing.*reservoir load"):
        http_store.list("")


def test_an_http_store_reads_one_file_after_another_on_one_kept_connection(
    http_files: HttpFiles,
) -> None:
    (http_files.directory / "kept").mkdir()
    (http_files.directory / "kept" / "k.bin").write_bytes(b"k" * 10_000)
    store = open_under_store(f"{http_files.url}kept/", UnderStoreSettings(credentials="anonymous"))
    info = store.head("k.bin")
    before = http_files.requests().get("connections", 0)
    for offset in range(0, 10_000, 1000):
        assert store.get_range("k.bin", offset, 1000, info.etag) == b"k" * 1000
    assert http_files.gets("kept/k.bin") == 10
    assert http_files.requests()["connections"] == before + 1


def test_an_http_store_refuses_writes(http_store: UnderStore) -> None:
    with pytest.raises(PermissionDenied, match="read-only"):
        http_store.put("x.bin", b"x")


def test_an_http_store_takes_no_credentials_but_anonymous() -> None:
    with pytest.raises(InvalidArgument, match="anonymous only"):
        open_under_store("http://127.0.0.1:9/f/", UnderStoreSettings(credentials="env"))


def test_a_server_that_ignores_range_is_an_error_not_a_whole_file_read(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"z" * 100_000)
    # Python's own file server answers every GET with the whole file (200).
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "-d", tmp_path],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        match = re.search(r"port (\d+)", server.stdout.readline())
        assert match is not None
        store = open_under_store(
            f"http://127.0.0.1:{match.group(1)}/", UnderStoreSettings(credentials="anonymous")
        )
        assert store.head("big.bin").size == 100_000
        with pytest.raises(InvalidArgument, match="ignores Range"):
            store.get_range("big.bin", 10, 20)
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_an_unreachable_http_server_is_unavailable_after_bounded_attempts() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        store = open_under_store(
            f"http://127.0.0.1:{port}/f/",
            UnderStoreSettings(credentials="anonymous", timeout_s=2, retries=2),
        )
        with pytest.raises(Unavailable, match="after 2 attempts"):
            store.head("a.bin")


def test_a_directory_is_no_object_yet_is_told_from_nothing(
    readable: tuple[UnderStore, Put],
) -> None:
    store, put = readable
    put("d/e/f.bin", b"x")
    assert store.is_directory("d/") and store.is_directory("d/e/")
    assert not store.is_directory("nothing/")
    with pytest.raises(NotFound):
        store.head("d")  # a directory's name is not a file, whatever the store answers
