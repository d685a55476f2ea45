"""The bodies of the stores' HTTP requests (the ranged GETs every store's reads take,
direct_gets.py; WebHDFS; the REST calls of GCS and Azure), against an in-process server,
plain or TLS, whose bodies break off or trickle: a body cut short is read again within the
bound, a body still arriving at the request's deadline fails with DeadlineExceeded at once
(another attempt would multiply the deadline), kept connections carry GET after GET."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from reservoir.common.errors import DeadlineExceeded, Unavailable
from reservoir.common.understore.http_under_store import HttpUnderStore
from reservoir.common.understore.range_connections import (
    DeadlinePassed,
    RangeConnections,
    connections_to,
)
from reservoir.common.understore.rest_calls import RestCalls
from reservoir.common.understore.under_store import BodyRetry, UnderStoreSettings
from reservoir.local import pki

DATA = bytes(range(256)) * 64  # 16 KiB


class _Files:
    """Serves DATA as /files/data with ranges; `mode` says how a GET's body goes: "whole",
    "cut" (half, then the connection closes), "trickle" (a byte every 50 ms: 100 bytes take 5 s)."""

    def __init__(self, mode: str, tls: pki.LocalCredentials | None = None) -> None:
        self.mode = mode
        self.gets = 0
        self.connections: set[int] = set()  # the connections GETs came on
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _head(self, start: int, end: int) -> None:
                self.send_response(206 if self.command == "GET" else 200)
                self.send_header("Content-Length", str(end - start + 1))
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(DATA)}")
                self.send_header("ETag", '"e"')
                self.end_headers()

            def do_HEAD(self) -> None:
                self._head(0, len(DATA) - 1)

            def do_GET(self) -> None:
                owner.gets += 1
                owner.connections.add(id(self.connection))
                first, _, last = self.headers["Range"][len("bytes=") :].partition("-")
                start, end = int(first), min(int(last), len(DATA) - 1)
                body = DATA[start : end + 1]
                self._head(start, end)
                mode = owner.mode if owner.gets == 1 or owner.mode == "trickle" else "whole"
                try:
                    if mode == "cut":
                        self.wfile.write(body[: len(body) // 2])
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                    elif mode == "trickle":
                        for i in range(len(body)):
                            self.wfile.write(body[i : i + 1])
                            self.wfile.flush()
                            time.sleep(0.05)
                    else:
                        self.wfile.write(body)
                except OSError:
                    self.close_connection = True  # the reader gave up: nothing to do

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(tls.cert, tls.key)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.origin = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{self.origin}/files/"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def files(request: pytest.FixtureRequest) -> Iterator[_Files]:
    served = _Files(request.param)
    yield served
    served.close()


def _settings(request_timeout_s: float) -> UnderStoreSettings:
    return UnderStoreSettings(
        timeout_s=5.0,
        request_timeout_s=request_timeout_s,
        retries=3,
        body_retry=BodyRetry(backoff_s=0.01, max_backoff_s=0.01),
    )


def _store(url: str, request_timeout_s: float = 30.0) -> HttpUnderStore:
    return HttpUnderStore(url, _settings(request_timeout_s))


@pytest.mark.parametrize("files", ["cut"], indirect=True)
def test_a_body_that_breaks_off_is_read_again_and_arrives_whole(files: _Files) -> None:
    assert _store(files.url).get_range("data", 100, 8000) == DATA[100:8100]
    assert files.gets == 2


@pytest.mark.parametrize("files", ["trickle"], indirect=True)
def test_a_body_still_arriving_at_the_deadline_fails_at_once_not_after_every_attempt(
    files: _Files,
) -> None:
    with pytest.raises(DeadlineExceeded) as caught:
        _store(files.url, request_timeout_s=0.3).get_range("data", 0, 100)
    assert "longer than its deadline" in str(caught.value)
    assert isinstance(caught.value, Unavailable)  # the reader may try another route
    assert files.gets == 1


@pytest.mark.parametrize("files", ["whole"], indirect=True)
def test_a_rest_call_reads_its_answer_whole(files: _Files) -> None:
    calls = RestCalls(files.url, _settings(30.0), endpoint=files.url, credential_source="env")
    answer = calls.call("GET", "/files/data", "get data", headers={"Range": "bytes=0-999"})
    assert answer.status == 206 and answer.body == DATA[:1000]


@pytest.mark.parametrize("files", ["trickle"], indirect=True)
def test_a_rest_call_whose_answer_trickles_past_the_deadline_fails_at_once(
    files: _Files,
) -> None:
    calls = RestCalls(files.url, _settings(0.3), endpoint=files.url, credential_source="env")
    with pytest.raises(DeadlineExceeded):
        calls.call("GET", "/files/data", "get data", headers={"Range": "bytes=0-99"})
    assert files.gets == 1


# ---- the stores' ranged GETs over TLS (range_connections.py) -----------------------------


def _get(pool: RangeConnections, start: int, length: int) -> bytes:
    out = bytearray(length)
    headers = {"Range": f"bytes={start}-{start + length - 1}"}
    answer = asyncio.run(pool.get_into("/files/data", headers, memoryview(out)))
    if answer.broke_off is not None:
        raise answer.broke_off
    assert answer.status == 206
    return bytes(out[: answer.received])


def test_tls_gets_one_after_another_share_one_kept_connection(tmp_path: Path) -> None:
    served = _Files("whole", tls=pki.create(tmp_path / "pki", []))
    try:
        pool = RangeConnections(served.origin, 2, 5.0, 30.0, str(tmp_path / "pki" / "ca.pem"))
        for start in range(0, len(DATA), 4096):
            assert _get(pool, start, 4096) == DATA[start : start + 4096]
        assert len(served.connections) == 1
    finally:
        served.close()


def test_a_tls_body_still_arriving_at_the_deadline_is_cut_there(tmp_path: Path) -> None:
    served = _Files("trickle", tls=pki.create(tmp_path / "pki", []))
    try:
        pool = RangeConnections(served.origin, 2, 5.0, 0.3, str(tmp_path / "pki" / "ca.pem"))
        began = time.monotonic()
        with pytest.raises(DeadlinePassed):
            _get(pool, 0, 100)  # 100 bytes at 20 a second: 5 s, the stall bound
        assert time.monotonic() - began < 2.0
    finally:
        served.close()


def test_origins_given_one_thread_name_share_its_threads_not_one_set_each() -> None:
    # HDFS redirects each block's read to one of many datanodes: a set of threads for each
    # would grow with the cluster.
    servers = [_Files("whole") for _ in range(3)]
    try:
        for served in servers:
            pool = connections_to(served.origin, 2, 5.0, 30.0, shared_threads="test-shared-get")
            for start in range(0, len(DATA), 4096):
                assert _get(pool, start, 4096) == DATA[start : start + 4096]
        names = [t.name for t in threading.enumerate() if t.name.startswith("test-shared-get")]
        assert 1 <= len(names) <= 2
    finally:
        for served in servers:
            served.close()


def test_an_https_mount_trusts_the_systems_cas_not_the_s3_clusters_aws_ca_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cluster whose S3 has a private CA (AWS_CA_BUNDLE, as boto3 takes it) still reads a
    # public mirror: the mirror's CA is the system's (here SSL_CERT_FILE stands for it).
    pki.create(tmp_path / "s3-pki", [])
    mirror = _Files("whole", tls=pki.create(tmp_path / "mirror-pki", []))
    try:
        monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "s3-pki" / "ca.pem"))
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "mirror-pki" / "ca.pem"))
        store = _store(mirror.url)
        assert store.head("data").size == len(DATA)
        assert store.get_range("data", 100, 8000, '"e"') == DATA[100:8100]
    finally:
        mirror.close()
