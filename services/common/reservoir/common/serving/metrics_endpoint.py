"""Prometheus metrics at GET /metrics, served from the server's own event loop.

The format is the one the scraper asks for (prometheus_client's own negotiation): the
OpenMetrics text when its Accept header names `application/openmetrics-text` (Prometheus
sends it by default), else the Prometheus text format; gzip-compressed when its
Accept-Encoding names gzip.

A scrape reads the server's counters on the loop that changes them, so it sees them
between two steps, never halfway through one, and needs no lock on the read path. It
costs the loop the time to render the text (well under a millisecond for these
registries); a slow or silent scraper costs nothing (its connection waits in the loop
and is closed after `request_timeout_s`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    disable_created_metrics,
)
from prometheus_client.exposition import choose_encoder, gzip_accepted

from reservoir.common import logs
from reservoir.common.config import MetricsSettings
from reservoir.common.errors import InvalidArgument

log = logs.get_logger(__name__)

PATH = "/metrics"
# A scrape request is one line and a few headers; anything larger is not one.
MAX_REQUEST_BYTES = 16 * 1024


def server_registry() -> CollectorRegistry:
    """A server's own registry, with the process's CPU, memory, file descriptors and
    garbage collector (the collectors prometheus_client registers by default)."""
    # A `_created` series beside every counter and histogram doubles what is scraped and
    # stored for nothing Prometheus uses (it sees resets itself).
    disable_created_metrics()
    registry = CollectorRegistry()
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


def split_listen(listen: str) -> tuple[str, int]:
    """'host:port' (port 0 = choose) -> (host, port); a clear error otherwise."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise InvalidArgument(f"RESERVOIR_METRICS_LISTEN must be host:port, not {listen!r}")
    return host.strip("[]"), int(port)


class MetricsEndpoint:
    """A minimal HTTP/1.1 server for one registry. `before_scrape` runs first on every
    scrape (e.g. the master counting inodes in etcd, under its own deadline)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        settings: MetricsSettings,
        before_scrape: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._registry = registry
        self._settings = settings
        self._before_scrape = before_scrape
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> int:
        """Starts listening; returns the port, or 0 when metrics are off."""
        if not self._settings.listen:
            return 0
        host, port = split_listen(self._settings.listen)
        try:
            self._server = await asyncio.start_server(
                self._serve, host, port, limit=MAX_REQUEST_BYTES
            )
        except OSError as exc:
            raise SystemExit(f"cannot serve metrics on {self._settings.listen}: {exc}") from exc
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("metrics_serving", address=f"{host}:{self.port}", path=PATH)
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(
                reader.readuntil(b"\r\n\r\n"), self._settings.request_timeout_s
            )
            reply = await self._answer(head)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        except asyncio.LimitOverrunError:
            reply = _Reply("431 Request Header Fields Too Large")
        except Exception as exc:  # a bug in a collector: this scrape fails, the server stays
            log.warning("metrics_scrape_failed", error=f"{type(exc).__name__}: {exc}")
            reply = _Reply("500 Internal Server Error", b"scrape failed; see the server's log\n")
        try:
            writer.write(reply.encode())
            await asyncio.wait_for(writer.drain(), self._settings.request_timeout_s)
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, head: bytes) -> _Reply:
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _Reply("400 Bad Request", b"not an HTTP/1.x request\n")
        method, target = parts[0], parts[1]
        if target.split("?", 1)[0] != PATH:
            return _Reply("404 Not Found", f"metrics are at {PATH}\n".encode())
        if method not in ("GET", "HEAD"):
            return _Reply("405 Method Not Allowed", headers={"Allow": "GET, HEAD"})
        if self._before_scrape is not None:
            await self._before_scrape()
        asked = _headers(head)
        encoder, content_type = choose_encoder(asked.get("accept", ""))
        body = encoder(self._registry)
        headers = {"Content-Type": content_type, "Vary": "Accept, Accept-Encoding"}
        if gzip_accepted(asked.get("accept-encoding", "")):
            # zlib's default level: within ~6% of the size of gzip.compress's own level 9
            # for a fifth of its CPU, which the event loop pays (~1 ms for 86 KB of text).
            body = gzip.compress(body, compresslevel=6)
            headers["Content-Encoding"] = "gzip"
        return _Reply("200 OK", body, headers, method == "GET")


def _headers(head: bytes) -> dict[str, str]:
    """A request's header fields by lower-case name (a repeated one: its values joined
    with commas, as HTTP says it may be)."""
    fields: dict[str, str] = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            continue
        key = name.strip().lower()
        fields[key] = f"{fields[key]}, {value.strip()}" if key in fields else value.strip()
    return fields


@dataclass
class _Reply:
    status: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    send_body: bool = True

    def encode(self) -> bytes:
        headers = {
            "Content-Type": "text/plain; charset=utf-8",
            "Content-Length": str(len(self.body)),
            "Connection": "close",
        } | self.headers
        lines = [f"HTTP/1.1 {self.status}", *(f"{k}: {v}" for k, v in headers.items())]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + self.body if self.send_body else head
