"""S3UnderStore's awaited ranged GETs (obstore) fail as clearly as its boto3 calls: the
endpoint or the credential source named, mapped through the same error table."""

from __future__ import annotations

import asyncio
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from reservoir.common.errors import OutOfRange, PermissionDenied, Unavailable
from reservoir.common.understore.s3_under_store import S3UnderStore
from reservoir.common.understore.under_store import UnderStoreSettings


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_names_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    settings = UnderStoreSettings(endpoint_url=endpoint, timeout_s=2, retries=1)
    store = S3UnderStore("s3://bucket/root/", settings)
    with pytest.raises(Unavailable, match=f"cannot connect to the under-store endpoint {endpoint}"):
        asyncio.run(store.get_range_async("k", 0, 10))


def test_missing_credentials_name_the_credential_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    settings = UnderStoreSettings(endpoint_url="http://s3.test:9000", timeout_s=2)
    store = S3UnderStore("s3://bucket/root/", settings)
    with pytest.raises(PermissionDenied, match=r"s3\.test:9000 \(credential source 'env'"):
        asyncio.run(store.get_range_async("k", 0, 10))


def _s3_answering(status: int, body: bytes) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # A short poll: `shutdown` waits for the loop to look, every 0.5 s by default.
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    return server


def _error_body(code: str, host_id: str) -> bytes:
    return (
        f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
        f"<RequestId>4164164160</RequestId><HostId>{host_id}</HostId></Error>"
    ).encode()


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [(503, "SlowDown", Unavailable), (416, "InvalidRange", OutOfRange)],
)
def test_only_a_416_status_is_out_of_range_whatever_numbers_the_error_body_holds(
    monkeypatch: pytest.MonkeyPatch, status: int, code: str, error: type[Exception]
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    server = _s3_answering(status, _error_body(code, "x416Range Not Satisfiable416="))
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        settings = UnderStoreSettings(endpoint_url=endpoint, timeout_s=2, retries=0)
        store = S3UnderStore("s3://bucket/root/", settings)
        with pytest.raises(error):
            asyncio.run(store.get_range_async("k", 0, 10))
    finally:
        server.shutdown()
        server.server_close()
