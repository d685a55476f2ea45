"""How long under-store (S3) requests take, by operation and outcome, for Prometheus.

Measured in one place: `MeasuredUnderStore` wraps whatever `open_under_store` opens, so
every backend (boto3, obstore, file://) and every caller (the worker's block fetches, the
master's listings and HEADs, mount checks) is timed the same way. An operation is one call
of the `UnderStore` interface, as the cache sees it: a `get` includes the SDK's own retries
and the re-reads of a body that broke off, a `list` every page of one directory level.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Histogram

from reservoir.common.errors import ReservoirError
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.serving.rpc_metrics import LATENCY_BUCKETS_S
from reservoir.common.understore.under_store import (
    NO_METADATA,
    ForwardingUnderStore,
    Keys,
    Listing,
    ObjectInfo,
    ObjectPage,
    Part,
    Parts,
    UnderStore,
)

OK = "ok"


def outcome_of(error: BaseException) -> str:
    """The `outcome` label of a failed request: the error's kind from the one error
    table (`not_found`, `permission_denied`, `conflict`, `unavailable`, ...), `cancelled`
    when the caller went away, `error` for anything else (a bug)."""
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    if isinstance(error, ReservoirError):
        return re.sub(r"(?<!^)(?=[A-Z])", "_", type(error).__name__).lower()
    return "error"


class UnderStoreMetrics:
    """The histogram, registered in one server's registry under its prefix
    (`reservoir_worker_`, `reservoir_master_`)."""

    def __init__(self, registry: CollectorRegistry, prefix: str) -> None:
        self.seconds = Histogram(
            prefix + "ufs_request_seconds",
            "Under-store requests by operation (get, head, list, put, check, the upload, copy, "
            "rename and delete calls), the store's scheme (s3, file, ...) and outcome (ok, or the error's kind), and how long each took.",
            ["operation", "scheme", "outcome"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )

    def measure(self, store: UnderStore) -> UnderStore:
        """`store`, with every request it makes timed."""
        return MeasuredUnderStore(store, self)

    @contextlib.contextmanager
    def timing(self, operation: str, scheme: str) -> Iterator[None]:
        start = time.perf_counter()
        outcome = OK
        try:
            yield
        except BaseException as exc:
            outcome = outcome_of(exc)
            raise
        finally:
            elapsed = time.perf_counter() - start
            self.seconds.labels(operation, scheme, outcome).observe(elapsed)


class MeasuredUnderStore(ForwardingUnderStore):
    """An under-store whose every request is timed; answers and errors pass unchanged."""

    def __init__(self, inner: UnderStore, metrics: UnderStoreMetrics) -> None:
        super().__init__(inner)
        self._scheme = urlsplit(inner.uri).scheme
        self._metrics = metrics

    def head(self, key: str) -> ObjectInfo:
        with self._metrics.timing("head", self._scheme):
            return self.inner.head(key)

    def list(self, prefix: str, limit: int | None = None) -> Listing:
        with self._metrics.timing("list", self._scheme):
            return self.inner.list(prefix, limit)

    def walk(self, prefix: str) -> Iterator[ObjectPage]:
        pages = self.inner.walk(prefix)
        while True:
            with self._metrics.timing("list", self._scheme):
                page = next(pages, None)
            if page is None:
                return
            yield page

    def get_range(self, key: str, offset: int, length: int, etag: str = "") -> bytes:
        with self._metrics.timing("get", self._scheme):
            return self.inner.get_range(key, offset, length, etag)

    async def get_range_async(
        self, key: str, offset: int, length: int, etag: str = ""
    ) -> bytes | memoryview:
        with self._metrics.timing("get", self._scheme):
            return await self.inner.get_range_async(key, offset, length, etag)

    async def get_range_into(self, key: str, offset: int, out: memoryview, etag: str = "") -> int:
        with self._metrics.timing("get", self._scheme):
            return await self.inner.get_range_into(key, offset, out, etag)

    def check(self) -> None:
        with self._metrics.timing("check", self._scheme):
            self.inner.check()

    def put(self, key: str, data: bytes, metadata: ObjectMetadata = NO_METADATA) -> ObjectInfo:
        with self._metrics.timing("put", self._scheme):
            return self.inner.put(key, data, metadata)

    def create_upload(self, key: str, metadata: ObjectMetadata = NO_METADATA) -> str:
        with self._metrics.timing("create_upload", self._scheme):
            return self.inner.create_upload(key, metadata)

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        with self._metrics.timing("upload_part", self._scheme):
            return self.inner.upload_part(key, upload_id, number, data)

    def complete_upload(
        self, key: str, upload_id: str, parts: Parts, metadata: ObjectMetadata = NO_METADATA
    ) -> ObjectInfo:
        with self._metrics.timing("complete_upload", self._scheme):
            return self.inner.complete_upload(key, upload_id, parts, metadata)

    def abort_upload(self, key: str, upload_id: str) -> None:
        with self._metrics.timing("abort_upload", self._scheme):
            self.inner.abort_upload(key, upload_id)

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        with self._metrics.timing("copy", self._scheme):
            return self.inner.copy(source, destination, if_match)

    def rename(self, source: str, destination: str) -> ObjectInfo:
        with self._metrics.timing("rename", self._scheme):
            return self.inner.rename(source, destination)

    def delete(self, keys: Keys) -> None:
        with self._metrics.timing("delete", self._scheme):
            self.inner.delete(keys)
