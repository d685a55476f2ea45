"""The stores' ranged GETs over TLS (`range_connections.py`): kept connections carry one
GET after another, and a body still trickling in at the deadline is cut there."""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from reservoir.common.understore.range_connections import DeadlinePassed, RangeConnections
from reservoir.local import pki

DATA = bytes(range(256)) * 64


class _Server:
    """An HTTPS server of DATA by ranges; `/slow` sends its body a byte at a time."""

    def __init__(self, creds: pki.LocalCredentials) -> None:
        served = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                served.connections.add(id(self.connection))
                first, last = (int(n) for n in self.headers["Range"][6:].split("-"))
                body = DATA[first : last + 1]
                self.send_response(206)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(DATA)}")
                self.end_headers()
                try:
                    if self.path == "/slow":
                        for i in range(len(body)):
                            self.wfile.write(body[i : i + 1])
                            self.wfile.flush()
                            time.sleep(0.05)
                    else:
                        self.wfile.write(body)
                except OSError:
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.connections: set[int] = set()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(creds.cert, creds.key)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        self.origin = f"https://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[_Server]:
    served = _Server(pki.create(tmp_path / "pki", []))
    yield served
    served.close()


def _get(pool: RangeConnections, target: str, start: int, length: int) -> tuple[int, bytes]:
    out = bytearray(length)
    headers = {"Range": f"bytes={start}-{start + length - 1}"}
    answer = asyncio.run(pool.get_into(target, headers, memoryview(out)))
    if answer.broke_off is not None:
        raise answer.broke_off
    return answer.status, bytes(out[: answer.received])


def test_tls_gets_one_after_another_share_one_kept_connection(
    server: _Server, tmp_path: Path
) -> None:
    pool = RangeConnections(server.origin, 2, 5.0, 30.0, str(tmp_path / "pki" / "ca.pem"))
    for start in range(0, len(DATA), 4096):
        assert _get(pool, "/data", start, 4096) == (206, DATA[start : start + 4096])
    assert len(server.connections) == 1


def test_a_tls_body_still_arriving_at_the_deadline_is_cut_there(
    server: _Server, tmp_path: Path
) -> None:
    pool = RangeConnections(server.origin, 2, 5.0, 0.3, str(tmp_path / "pki" / "ca.pem"))
    began = time.monotonic()
    with pytest.raises(DeadlinePassed):
        _get(pool, "/slow", 0, 100)  # 100 bytes at 20 a second: 5 s, the stall bound
    assert time.monotonic() - began < 2.0
    # The next GET has a deadline of its own.
    assert _get(pool, "/data", 0, 10) == (206, DATA[:10])
