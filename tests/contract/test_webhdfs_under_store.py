"""What the webhdfs:// under-store does beyond the one contract (test_under_store.py and
test_under_store_writes.py run it there too), against the WebHDFS server process
(`tests/webhdfs_server.py`: a namenode that redirects reads and writes to a datanode port,
as HDFS does): reads through the redirect, its change token, writes published by RENAME and
uploads joined by CONCAT, credentials by reference reaching the server as `user.name`,
redirects that are refused, kept connections, and a server that cannot be reached."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import uuid
from pathlib import Path
from typing import Any

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
from reservoir.common.understore.webhdfs_under_store import HIDDEN, WebHdfsUnderStore

from ..webhdfs_server import WebHdfsServer

_ANONYMOUS = UnderStoreSettings(credentials="anonymous", timeout_s=5)


@pytest.fixture
def server(webhdfs_server: WebHdfsServer) -> WebHdfsServer:
    return webhdfs_server


@pytest.fixture
def directory(server: WebHdfsServer) -> str:
    """A fresh directory's path below the served root (it need not exist yet)."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def store(server: WebHdfsServer, directory: str) -> WebHdfsUnderStore:
    (server.root / directory).mkdir()
    opened = open_under_store(server.uri(f"{directory}/"), _ANONYMOUS)
    assert isinstance(opened, WebHdfsUnderStore)
    return opened


def _served(server: WebHdfsServer, directory: str, key: str) -> Path:
    return server.root / directory / key


# ---- reads ---------------------------------------------------------------------------------


def test_a_file_written_into_hdfs_is_read_byte_exact_through_the_datanode_redirect(
    server: WebHdfsServer, directory: str, store: UnderStore
) -> None:
    data = os.urandom(300_000)
    path = _served(server, directory, "a/b.bin")
    path.parent.mkdir()
    path.write_bytes(data)
    info = store.head("a/b.bin")
    assert info.size == 300_000 and info.etag
    assert store.get_range("a/b.bin", 0, 300_000, info.etag) == data
    assert store.get_range("a/b.bin", 1000, 5000, info.etag) == data[1000:6000]
    assert store.get_range("a/b.bin", 299_990, 100) == data[299_990:]
    assert store.get_range("a/b.bin", 300_000, 100, info.etag) == b""
    assert store.get_range("a/b.bin", 400_000, 100) == b""
    opens = [r for r in server.requests() if r["op"] == "OPEN" and r["path"].endswith("b.bin")]
    assert {r["node"] for r in opens} == {"namenode", "datanode"}


def test_a_read_is_received_straight_into_the_buffer_not_through_http_client(
    server: WebHdfsServer, directory: str, store: UnderStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # http.client reads a body into bytes of its own, copied again into the block: the
    # OPEN and its redirect go through the GET stack every store's reads take instead.
    data = os.urandom(200_000)
    info = store.put("into.bin", data)
    sent = http.client.HTTPConnection.request

    def no_open(conn: http.client.HTTPConnection, method: str, url: str, *a: Any, **k: Any) -> Any:
        assert "op=OPEN" not in url, "an OPEN went through http.client"
        return sent(conn, method, url, *a, **k)

    monkeypatch.setattr(http.client.HTTPConnection, "request", no_open)
    buffer = bytearray(300_000)
    got = asyncio.run(store.get_range_into("into.bin", 1000, memoryview(buffer), info.etag))
    assert got == 199_000 and bytes(buffer[:got]) == data[1000:]
    assert store.get_range("into.bin", 5, 10) == data[5:15]
    with pytest.raises(NotFound):
        asyncio.run(store.get_range_into("none.bin", 0, memoryview(bytearray(4))))
    opens = [r for r in server.requests() if r["op"] == "OPEN" and r["path"].endswith("into.bin")]
    assert {r["node"] for r in opens} == {"namenode", "datanode"}


def test_the_change_token_is_mtime_and_length_and_changes_with_a_rewrite(
    server: WebHdfsServer, directory: str, store: UnderStore
) -> None:
    path = _served(server, directory, "v.bin")
    path.write_bytes(b"old")
    old = store.head("v.bin")
    mtime_ms = path.stat().st_mtime_ns // 1_000_000
    assert old.etag == f"{mtime_ms:x}-{3:x}" and old.mtime_ms == mtime_ms
    path.write_bytes(b"newer content")
    new = store.head("v.bin")
    assert new.etag != old.etag and new.size == 13


def test_a_read_with_a_stale_token_past_either_end_is_a_conflict(store: UnderStore) -> None:
    old = store.put("v.bin", b"old")
    store.put("v.bin", b"newer content")
    with pytest.raises(Conflict):
        store.get_range("v.bin", 10, 3, old.etag)  # past the old end: no OPEN, still checked
    longer = store.put("w.bin", b"a longer first version")
    store.put("w.bin", b"short")
    with pytest.raises(Conflict):
        store.get_range("w.bin", 10, 5, longer.etag)  # past the new end


def test_a_directory_is_not_a_file(store: UnderStore) -> None:
    store.put("d/x.bin", b"x")
    with pytest.raises(NotFound, match="not a file"):
        store.head("d")
    with pytest.raises(NotFound):
        store.get_range("d", 0, 10)


def test_check_fails_for_a_file_or_nothing(
    server: WebHdfsServer, store: UnderStore, directory: str
) -> None:
    store.put("f.bin", b"f")
    with pytest.raises(NotFound, match="not a directory"):
        open_under_store(server.uri(f"{directory}/f.bin/"), _ANONYMOUS).check()
    with pytest.raises(NotFound):
        open_under_store(server.uri(f"{directory}/none/"), _ANONYMOUS).check()


def test_hdfs_uris_speak_webhdfs_to_the_same_port(server: WebHdfsServer, directory: str) -> None:
    (server.root / directory).mkdir()
    (server.root / directory / "h.bin").write_bytes(b"hdfs")
    store = open_under_store(server.uri(f"{directory}/", scheme="hdfs"), _ANONYMOUS)
    assert store.uri.startswith("hdfs://")
    assert store.get_range("h.bin", 0, 10) == b"hdfs"
    assert store.key_of(store.uri_of("a/b")) == "a/b"


def test_a_uri_without_a_port_or_with_a_query_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="HTTP port"):
        open_under_store("webhdfs://namenode/data/", _ANONYMOUS)
    with pytest.raises(InvalidArgument, match="query"):
        open_under_store("webhdfs://namenode:9870/data/?op=OPEN", _ANONYMOUS)


# ---- writes --------------------------------------------------------------------------------


def test_put_publishes_the_whole_file_by_rename_and_leaves_nothing_behind(
    server: WebHdfsServer, directory: str, store: UnderStore
) -> None:
    store.put("o/p.bin", b"first")
    info = store.put("o/p.bin", b"second version")
    assert _served(server, directory, "o/p.bin").read_bytes() == b"second version"
    assert info.size == 14 and info == store.head("o/p.bin")
    assert list((server.root / directory / HIDDEN).iterdir()) == []
    ops = [r["op"] for r in server.requests() if directory in r["path"]]
    assert "RENAME" in ops and ops.count("CREATE") == 4  # each put: namenode, then datanode


def test_parts_are_joined_by_one_concat_and_published_by_one_rename(
    server: WebHdfsServer, directory: str, store: UnderStore
) -> None:
    key = "ckpt/model.bin"
    upload_id = store.create_upload(key)
    worker = open_under_store(server.uri(f"{directory}/"), _ANONYMOUS)
    # HDFS refuses to CONCAT an empty file: an empty part is left out, not sent.
    chunks = [os.urandom(70_000), os.urandom(70_000), b"", os.urandom(123)]
    parts = [worker.upload_part(key, upload_id, n, c) for n, c in enumerate(chunks, start=1)]
    info = store.complete_upload(key, upload_id, parts)
    assert info.size == sum(len(c) for c in chunks)
    assert _served(server, directory, key).read_bytes() == b"".join(chunks)
    assert not (server.root / directory / HIDDEN / upload_id).exists()
    ops = [r["op"] for r in server.requests() if upload_id in r["path"]]
    assert ops.count("CONCAT") == 1 and ops.count("RENAME") == 1


def test_a_part_uploaded_again_since_is_a_conflict_at_completion(store: UnderStore) -> None:
    upload_id = store.create_upload("k.bin")
    first = store.upload_part("k.bin", upload_id, 1, b"one")
    store.upload_part("k.bin", upload_id, 1, b"other bytes")
    with pytest.raises(Conflict, match="part 1"):
        store.complete_upload("k.bin", upload_id, [first])
    with pytest.raises(NotFound):
        store.head("k.bin")


def test_a_part_sent_after_an_abort_does_not_bring_the_upload_back(
    server: WebHdfsServer, directory: str, store: UnderStore
) -> None:
    upload_id = store.create_upload("a.bin")
    store.upload_part("a.bin", upload_id, 1, b"part")
    store.abort_upload("a.bin", upload_id)
    with pytest.raises(NotFound, match="completed or aborted"):
        store.upload_part("a.bin", upload_id, 2, b"late")
    assert not (server.root / directory / HIDDEN / upload_id).exists()
    with pytest.raises(NotFound):
        store.complete_upload("a.bin", upload_id, [])


def test_upload_state_lives_in_the_store_as_a_manifest_naming_the_key(
    server: WebHdfsServer, directory: str, store: UnderStore
) -> None:
    upload_id = store.create_upload("m/n.bin")
    manifest = server.root / directory / HIDDEN / upload_id / "upload.json"
    assert json.loads(manifest.read_text())["key"] == "m/n.bin"


def test_a_copy_streams_the_bytes_through_a_temporary_file(
    server: WebHdfsServer, directory: str, store: UnderStore
) -> None:
    data = os.urandom(3_000_000)  # several of the streamed chunks
    source = store.put("src.bin", data)
    copied = store.copy("src.bin", "dst/copy.bin", source.etag)
    assert copied.size == len(data)
    assert _served(server, directory, "dst/copy.bin").read_bytes() == data
    assert list((server.root / directory / HIDDEN).iterdir()) == []


def test_keys_with_dot_segments_or_in_the_hidden_directory_are_refused(
    store: UnderStore,
) -> None:
    for key in ("../escape.bin", "a/./b", "/abs", "a//b", f"{HIDDEN}/x"):
        with pytest.raises(InvalidArgument):
            store.head(key)


# ---- credentials ---------------------------------------------------------------------------


def _users(server: WebHdfsServer, directory: str) -> set[str]:
    return {r["user"] for r in server.requests() if directory in r["path"]}


def test_the_env_source_sends_hadoop_user_name_on_every_request(
    server: WebHdfsServer, directory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HADOOP_USER_NAME", "trainer")
    settings = UnderStoreSettings(credentials="env", timeout_s=5)
    store = open_under_store(server.uri(f"{directory}/"), settings)
    store.put("e.bin", b"env")
    assert store.get_range("e.bin", 0, 3) == b"env"
    assert _users(server, directory) == {"trainer"}  # namenode and datanode requests alike


def test_the_env_source_without_hadoop_user_name_sends_no_user(
    server: WebHdfsServer, directory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HADOOP_USER_NAME", raising=False)
    store = open_under_store(server.uri(f"{directory}/"), UnderStoreSettings(credentials="env"))
    with pytest.raises(NotFound):
        store.head("x.bin")
    assert _users(server, directory) == {""}


def test_a_file_source_sends_the_user_on_its_first_line(
    server: WebHdfsServer, directory: str, tmp_path: Path
) -> None:
    user_file = tmp_path / "hdfs-user"
    user_file.write_text("etl-writer\nignored\n")
    settings = UnderStoreSettings(credentials=f"file:{user_file}", timeout_s=5)
    store = open_under_store(server.uri(f"{directory}/"), settings)
    store.put("f.bin", b"file")
    assert _users(server, directory) == {"etl-writer"}


def test_an_unreadable_or_empty_user_file_is_refused_at_open(tmp_path: Path) -> None:
    with pytest.raises(PermissionDenied, match="cannot read credentials file"):
        open_under_store(
            "webhdfs://127.0.0.1:9/d/", UnderStoreSettings(credentials=f"file:{tmp_path}/none")
        )
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(InvalidArgument, match="names no user"):
        open_under_store(
            "webhdfs://127.0.0.1:9/d/", UnderStoreSettings(credentials=f"file:{tmp_path}/empty")
        )


def test_a_server_that_requires_a_user_refuses_anonymous_and_the_name_is_never_echoed(
    tmp_path: Path,
) -> None:
    server = WebHdfsServer(tmp_path, "--require-user", "--read-only-user", "alice")
    try:
        (tmp_path / "d").mkdir()
        with pytest.raises(PermissionDenied, match="AccessControlException"):
            open_under_store(server.uri("d/"), _ANONYMOUS).check()
        user_file = tmp_path / "user"
        user_file.write_text("alice\n")
        settings = UnderStoreSettings(credentials=f"file:{user_file}", timeout_s=5)
        store = open_under_store(server.uri("d/"), settings)
        store.check()
        with pytest.raises(PermissionDenied, match="AccessControlException") as refused:
            store.put("no.bin", b"no")
        assert "alice" not in str(refused.value) and "user=<user>" in str(refused.value)
        assert f"file:{user_file}" in str(refused.value)  # the source, never the user
    finally:
        server.stop()


# ---- redirects and failures ----------------------------------------------------------------


def test_a_redirect_to_a_link_local_datanode_is_refused(tmp_path: Path) -> None:
    server = WebHdfsServer(tmp_path, "--datanode-host", "169.254.169.254")
    try:
        (tmp_path / "x.bin").write_bytes(b"secret?")
        store = open_under_store(server.uri(), _ANONYMOUS)
        with pytest.raises(PermissionDenied, match="link-local"):
            store.get_range("x.bin", 0, 7)
        with pytest.raises(PermissionDenied, match="link-local"):
            store.put("y.bin", b"y")
        assert not any(r["node"] == "datanode" for r in server.requests())
    finally:
        server.stop()


def test_a_standby_namenode_is_asked_again_a_bounded_number_of_times(tmp_path: Path) -> None:
    server = WebHdfsServer(tmp_path, "--standby-answers", "3")
    try:
        (tmp_path / "s.bin").write_bytes(b"served")
        settings = UnderStoreSettings(credentials="anonymous", timeout_s=5, retries=2)
        store = open_under_store(server.uri(), settings)
        with pytest.raises(Unavailable, match="StandbyException.*after 2 attempts"):
            store.head("s.bin")
        assert len(server.requests()) == 2
        assert store.head("s.bin").size == 6  # one more standby answer, then the active one
        assert len(server.requests()) == 4
    finally:
        server.stop()


def test_an_unreachable_namenode_is_unavailable_after_bounded_attempts() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        store = open_under_store(
            f"webhdfs://127.0.0.1:{port}/d/",
            UnderStoreSettings(credentials="anonymous", timeout_s=2, retries=2),
        )
        with pytest.raises(Unavailable, match="after 2 attempts"):
            store.head("a.bin")
        with pytest.raises(Unavailable, match="after 2 attempts"):
            store.check()


def test_reads_one_after_another_reuse_one_connection_to_each_node(
    server: WebHdfsServer, directory: str, store: UnderStore
) -> None:
    info = store.put("k.bin", b"k" * 10_000)
    before = server.connections()
    for offset in range(0, 10_000, 1000):
        assert store.get_range("k.bin", offset, 1000, info.etag) == b"k" * 1000
    after = server.connections()
    assert after["namenode"] <= before["namenode"] + 1
    assert after["datanode"] <= before["datanode"] + 1
