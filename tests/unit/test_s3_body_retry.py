"""S3UnderStore's ranged reads (obstore's, and those received into a caller's buffer) read
again a body that breaks off, within a bound (the one loop), against an in-process HTTP(S)
server that cuts its bodies short."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from reservoir.common.errors import PermissionDenied, Unavailable
from reservoir.common.understore.s3_under_store import S3UnderStore
from reservoir.common.understore.under_store import BodyRetry, UnderStoreSettings
from reservoir.local import pki

DATA = bytes(range(256)) * 40  # 10240 bytes


class _BreakingS3:
    """Answers ranged GETs of DATA; the first `faults` bodies stop halfway and the
    connection closes (a reset, as a dropped stream looks to the client)."""

    def __init__(self, faults: int, tls: ssl.SSLContext | None = None) -> None:
        self.faults = faults
        self.gets = 0
        self.ranges: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                owner.gets += 1
                spec = self.headers.get("Range", "")
                owner.ranges.append(spec)
                first, _, last = spec[len("bytes=") :].partition("-")
                start, end = int(first), min(int(last), len(DATA) - 1)
                body = DATA[start : end + 1]
                self.send_response(206)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(DATA)}")
                self.send_header("ETag", '"e"')
                self.send_header("Last-Modified", "Sun, 06 Dec 2026 08:00:00 GMT")
                self.end_headers()
                if owner.gets <= owner.faults:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()
        scheme = "https" if tls is not None else "http"
        self.endpoint = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def breaking(request: pytest.FixtureRequest) -> Iterator[_BreakingS3]:
    s3 = _BreakingS3(getattr(request, "param", 0))
    try:
        yield s3
    finally:
        s3.server.shutdown()
        s3.server.server_close()


def _store(
    endpoint: str,
    attempts: int = 3,
    retries: int = 1,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> S3UnderStore:
    retry = BodyRetry(attempts=attempts, backoff_s=0.001, max_backoff_s=0.002)
    settings = UnderStoreSettings(
        endpoint_url=endpoint, body_retry=retry, retries=retries, timeout_s=2
    )
    return S3UnderStore("s3://bucket/root/", settings)


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")


@pytest.mark.parametrize("breaking", [2], indirect=True)
def test_a_body_that_breaks_off_is_read_again_and_the_bytes_are_exact(
    breaking: _BreakingS3,
) -> None:
    assert _store(breaking.endpoint).get_range("k", 1000, 4096) == DATA[1000:5096]
    assert breaking.gets >= 3


@pytest.mark.parametrize("breaking", [2], indirect=True)
def test_an_awaited_read_takes_the_same_retries(breaking: _BreakingS3) -> None:
    store = _store(breaking.endpoint)
    assert bytes(asyncio.run(store.get_range_async("k", 0, 4096))) == DATA[:4096]


@pytest.mark.parametrize("breaking", [100], indirect=True)
def test_a_body_that_keeps_breaking_off_fails_after_the_bound_naming_the_endpoint(
    breaking: _BreakingS3,
) -> None:
    with pytest.raises(Unavailable, match=f"{breaking.endpoint} broke off 3 times"):
        _store(breaking.endpoint, attempts=2).get_range("k", 0, 100)
    assert breaking.gets == 3  # one GET a try, however the body broke


def test_a_range_clipped_at_the_end_of_the_object_is_not_a_short_read(
    breaking: _BreakingS3,
) -> None:
    assert _store(breaking.endpoint).get_range("k", len(DATA) - 10, 4096) == DATA[-10:]
    assert breaking.gets == 1


def test_backoff_grows_and_stays_under_its_cap() -> None:
    retry = BodyRetry(attempts=5, backoff_s=0.1, max_backoff_s=0.3)
    delays = [retry.delay_s(n) for n in range(5)]
    assert 0.05 <= delays[0] <= 0.1
    assert all(d <= 0.3 for d in delays)
    assert delays[4] >= 0.15


def test_a_refused_connection_names_the_endpoint_not_credentials() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(Unavailable, match=f"cannot connect to the under-store endpoint {endpoint}"):
        _store(endpoint).get_range("k", 0, 10)


def test_missing_credentials_name_the_credential_source(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = _store("http://s3.test:9000")
    with pytest.raises(
        PermissionDenied,
        match=r"credential source 'env'.*s3\.test:9000|s3\.test:9000.*credential source 'env'",
    ):
        store.head("k")


@pytest.mark.parametrize("breaking", [2], indirect=True)
def test_a_body_into_a_buffer_that_breaks_off_is_resumed_into_the_same_buffer(
    breaking: _BreakingS3,
) -> None:
    buffer = bytearray(4096)
    got = asyncio.run(_store(breaking.endpoint).get_range_into("k", 1000, memoryview(buffer)))
    assert (got, bytes(buffer)) == (4096, DATA[1000:5096])
    # Each GET after a break asks only for the bytes still missing: half of what was left.
    assert breaking.ranges == ["bytes=1000-5095", "bytes=3048-5095", "bytes=4072-5095"]


@pytest.mark.parametrize("breaking", [100], indirect=True)
def test_a_body_into_a_buffer_that_keeps_breaking_off_fails_after_the_bound(
    breaking: _BreakingS3,
) -> None:
    store = _store(breaking.endpoint, attempts=2)
    with pytest.raises(Unavailable, match=f"{breaking.endpoint} broke off 3 times"):
        asyncio.run(store.get_range_into("k", 0, memoryview(bytearray(100))))
    assert breaking.gets == 3


def test_a_read_into_a_buffer_from_a_refused_connection_is_unavailable_after_its_attempts() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    store = _store(endpoint, retries=2)
    with pytest.raises(Unavailable, match=f"cannot connect to the under-store endpoint {endpoint}"):
        asyncio.run(store.get_range_into("k", 0, memoryview(bytearray(10))))


def test_a_body_into_a_buffer_over_https_is_exact_and_resumed_when_it_breaks_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = pki.create(tmp_path / "pki", [])
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(creds.cert, creds.key)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(creds.ca))  # boto3's and this path's CAs
    s3 = _BreakingS3(1, tls)
    try:
        buffer = bytearray(len(DATA))
        store = _store(s3.endpoint)
        assert asyncio.run(store.get_range_into("k", 0, memoryview(buffer))) == len(DATA)
        assert bytes(buffer) == DATA
        assert s3.ranges == [f"bytes=0-{len(DATA) - 1}", f"bytes={len(DATA) // 2}-{len(DATA) - 1}"]
    finally:
        s3.server.shutdown()
        s3.server.server_close()
