"""A local S3-compatible server for development, tests and benchmarks.

moto's S3 implementation (and its SQS: a bucket's event notifications reach a queue, as
on AWS) behind a thin WSGI layer that (1) counts requests by kind at the
server — so tests measure what really reached "S3", not what our code believes it sent —
and (2) can add a first-byte latency, so a loopback store behaves like a remote one.

    python -m reservoir.local.s3server --port 9000 --latency-ms 20

Admin endpoints: GET /_reservoir/stats, GET /_reservoir/gets?since=T (the wall-clock
times of the object GETs received since T, the last 100,000 at most: rates over time),
POST /_reservoir/reset,
POST /_reservoir/config?latency_ms=N&fail_gets=N&truncate_gets=N&fail_parts=N (fail the
next N object GETs with 503; cut the body of the next N successful object GETs in half,
then drop the connection: what a reset or truncated stream looks like to the reader; fail
the next N multipart part uploads with 503).

With `--data-dir`, the objects outlive the process: they are loaded from that directory at
start and written back there (with their ETags, so cached file ids stay valid) when the
server is stopped with SIGTERM or SIGINT — `reservoir local up --resume` relies on it.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from reservoir.common.redaction import SecretRedactingFilter

ADMIN = "/_reservoir/"


def _is_sqs(environ: dict[str, Any]) -> bool:
    """An SQS call (botocore signs it for the `sqs` service; its JSON protocol names it)."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    return target.startswith("AmazonSQS") or "/sqs/aws4_request" in environ.get(
        "HTTP_AUTHORIZATION", ""
    )


class S3Observer:
    def __init__(self, app: Callable[..., Iterable[bytes]], latency_ms: float) -> None:
        self._app = app
        self.latency_s = latency_ms / 1000
        self.fail_gets = 0
        self.truncate_gets = 0
        self.fail_parts = 0
        self.counts: Counter[str] = Counter()
        self.get_times: deque[float] = deque(maxlen=100_000)
        self._lock = threading.Lock()

    @staticmethod
    def kind(method: str, path: str, query: str) -> str:
        parts = [p for p in path.split("/") if p]
        if method == "GET":
            if len(parts) >= 2 and "uploads" not in query:
                return "GET"
            return "LIST" if len(parts) == 1 else "OTHER"
        if method in ("HEAD", "PUT", "DELETE", "POST"):
            return method
        return "OTHER"

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        if path.startswith(ADMIN):
            return self._admin(environ, path[len(ADMIN) :], start_response)
        query = environ.get("QUERY_STRING", "")
        kind = self.kind(environ["REQUEST_METHOD"], path, query)
        if _is_sqs(environ):
            kind = "SQS"  # moto serves the queues too; S3 counts stay S3's
        with self._lock:
            self.counts[kind] += 1
            if kind == "GET":
                self.get_times.append(time.time())
            failing = kind == "GET" and self.fail_gets > 0
            if failing:
                self.fail_gets -= 1
            elif kind == "PUT" and "partNumber=" in query and self.fail_parts > 0:
                self.fail_parts -= 1
                failing = True
            truncating = kind == "GET" and not failing and self.truncate_gets > 0
            if truncating:
                self.truncate_gets -= 1
        if kind in ("GET", "HEAD", "LIST") and self.latency_s > 0:
            time.sleep(self.latency_s)
        if failing:
            start_response("503 Service Unavailable", [("Content-Type", "application/xml")])
            return [b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"]
        if truncating:
            return self._truncated(environ, start_response)
        return self._app(environ, start_response)

    def _truncated(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        """The real response's headers (with its full Content-Length) and half its body,
        then the connection shut down. An error response is left whole (and not counted)."""
        status: list[str] = []

        def remember(code: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            status.append(code)
            return start_response(code, headers, *exc_info)

        body = b"".join(self._app(environ, remember))
        sock = environ.get("werkzeug.socket")
        if len(body) < 2 or sock is None or not status or not status[0].startswith("2"):
            with self._lock:
                self.truncate_gets += 1
            return [body]

        def half_then_hang_up() -> Iterable[bytes]:
            yield body[: len(body) // 2]
            sock.shutdown(socket.SHUT_RDWR)

        return half_then_hang_up()

    def _admin(
        self, environ: dict[str, Any], action: str, start_response: Callable[..., Any]
    ) -> Any:
        if action == "gets":
            since = float(parse_qs(environ.get("QUERY_STRING", "")).get("since", ["0"])[0])
            with self._lock:
                times = [t for t in self.get_times if t >= since]
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps({"times": times}).encode()]
        if action == "reset":
            with self._lock:
                self.counts.clear()
                self.get_times.clear()
        elif action == "config":
            query = parse_qs(environ.get("QUERY_STRING", ""))
            if "latency_ms" in query:
                self.latency_s = float(query["latency_ms"][0]) / 1000
            if "fail_gets" in query:
                self.fail_gets = int(query["fail_gets"][0])
            if "truncate_gets" in query:
                self.truncate_gets = int(query["truncate_gets"][0])
            if "fail_parts" in query:
                self.fail_parts = int(query["fail_parts"][0])
        body = json.dumps(
            {"counts": dict(self.counts), "latency_ms": self.latency_s * 1000}
        ).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]


class ObjectSnapshot:
    """The moto server's buckets and objects, written to and read from a directory:
    `manifest.json` (bucket, region, key, ETag, file) and one file per object."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @staticmethod
    def _backends() -> list[Any]:
        from moto.s3.models import s3_backends

        return [
            s3_backends[account][partition]
            for account in s3_backends
            for partition in s3_backends[account]
        ]

    def restore(self) -> int:
        manifest = self.directory / "manifest.json"
        if not manifest.exists():
            return 0
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        entries = json.loads(manifest.read_text())
        for bucket in entries["buckets"]:
            backend.create_bucket(bucket["name"], bucket["region"])
        for obj in entries["objects"]:
            data = (self.directory / "objects" / obj["file"]).read_bytes()
            backend.put_object(obj["bucket"], obj["key"], data, etag=obj["etag"])
        return len(entries["objects"])

    def save(self) -> int:
        staging = self.directory.with_name(self.directory.name + ".saving")
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "objects").mkdir(parents=True)
        buckets: list[dict[str, str]] = []
        objects: list[dict[str, str]] = []
        for backend in self._backends():
            for bucket in list(backend.buckets.values()):
                buckets.append({"name": bucket.name, "region": bucket.region_name})
                for key in list(bucket.keys.values()):
                    name = f"{len(objects):08d}"
                    (staging / "objects" / name).write_bytes(key.value)
                    objects.append(
                        {
                            "bucket": bucket.name,
                            "key": key.name,
                            "etag": key.etag.strip('"'),
                            "file": name,
                        }
                    )
        (staging / "manifest.json").write_text(json.dumps({"buckets": buckets, "objects": objects}))
        shutil.rmtree(self.directory, ignore_errors=True)
        staging.rename(self.directory)
        return len(objects)


def main(argv: list[str] | None = None) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    parser = argparse.ArgumentParser(prog="reservoir-s3server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--data-dir", help="keep the objects here across restarts")
    args = parser.parse_args(argv)
    snapshot = ObjectSnapshot(Path(args.data_dir)) if args.data_dir else None
    if snapshot is not None:
        print(f"s3server restored {snapshot.restore()} objects from {args.data_dir}", flush=True)
    # Its request log holds each request line: a pre-signed GET's query string carries
    # the access key id and the signature, which no log line may show.
    logging.getLogger("werkzeug").addFilter(SecretRedactingFilter())
    app = S3Observer(DomainDispatcherApplication(create_backend_app), args.latency_ms)
    server = make_server(
        args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler
    )

    def stop(*_: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"s3server listening on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()
    if snapshot is not None:
        print(f"s3server saved {snapshot.save()} objects to {args.data_dir}", flush=True)


if __name__ == "__main__":
    main()
