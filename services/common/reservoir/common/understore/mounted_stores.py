"""Opening under-stores: by URI, and one per mount, reopened whenever the mount changes."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from reservoir.common import logs
from reservoir.common.config import UnderStoreCalls
from reservoir.common.models import Mount, MountOptions
from reservoir.common.understore.store_schemes import open_store
from reservoir.common.understore.under_store import BodyRetry, UnderStore, UnderStoreSettings

if TYPE_CHECKING:  # prometheus_client is a server dependency; clients open stores unmeasured
    from reservoir.common.understore.store_budgets import StoreBudgets
    from reservoir.common.understore.under_store_metrics import UnderStoreMetrics

log = logs.get_logger(__name__)


class MountedStores:
    """One open under-store per mount, opened on first use (or ahead of it) and reopened whenever the mount
    changed (remounted: a new URI, endpoint, region, credential source or block size).
    Credentials are resolved here, in this process, never stored.

    Building an S3 store costs ~0.3 s of CPU (boto3 loads its service model): `open` does
    it on a thread, once however many callers wait, so the caller's event loop keeps
    serving; `prepare` starts it as soon as a mount is known, before its first read."""

    def __init__(
        self,
        timeout_s: float,
        retries: int = 3,
        max_connections: int = 16,
        body_retry: BodyRetry | None = None,
        metrics: UnderStoreMetrics | None = None,
        budgets: StoreBudgets | None = None,
        presign_ttl_s: float = 60.0,
    ) -> None:
        """`metrics`: where a server times its stores' requests (a client has none).
        `budgets`: the gates a budgeted mount's GETs pass (a worker's)."""
        self._timeout_s = timeout_s
        self._retries = retries
        self._max_connections = max_connections
        self._body_retry = body_retry or BodyRetry()
        self._presign_ttl_s = presign_ttl_s
        self._metrics = metrics
        self._budgets = budgets
        self._open: dict[str, tuple[Mount, UnderStore]] = {}
        self._opening: dict[str, tuple[Mount, asyncio.Future[UnderStore]]] = {}
        self._preparing: set[asyncio.Task[UnderStore]] = set()

    @classmethod
    def from_settings(
        cls,
        calls: UnderStoreCalls,
        metrics: UnderStoreMetrics | None = None,
        budgets: StoreBudgets | None = None,
    ) -> MountedStores:
        return cls(
            calls.timeout_s,
            calls.retries,
            calls.concurrency,
            BodyRetry(calls.body_retries, calls.retry_backoff_s, calls.retry_backoff_max_s),
            metrics,
            budgets,
            calls.presign_ttl_s,
        )

    def settings(self, options: MountOptions, retries: int | None = None) -> UnderStoreSettings:
        return UnderStoreSettings(
            endpoint_url=options.endpoint_url,
            region=options.region,
            credentials=options.credentials,
            timeout_s=self._timeout_s,
            retries=self._retries if retries is None else retries,
            max_connections=self._max_connections,
            body_retry=self._body_retry,
            presign_ttl_s=self._presign_ttl_s,
        )

    async def open(self, mount: Mount) -> UnderStore:
        """The mount's store, opened on a thread when it is not open yet (or the mount
        changed since)."""
        opened = self._open.get(mount.path)
        if opened is not None and opened[0] == mount:
            return opened[1]
        pending = self._opening.get(mount.path)
        if pending is None or pending[0] != mount:
            if self._budgets is not None and mount.options.budgeted:
                self._budgets.gate(mount.path)  # made on the loop that uses it
            future = asyncio.ensure_future(asyncio.to_thread(self._open_store, mount))
            pending = (mount, future)
            self._opening[mount.path] = pending
            future.add_done_callback(lambda done: self._opened(mount, done))
        return await asyncio.shield(pending[1])

    def _open_store(self, mount: Mount) -> UnderStore:
        if self._budgets is None:
            return open_under_store(mount.uri, self.settings(mount.options), self._metrics)
        settings = self.settings(mount.options)
        if mount.options.budgeted:
            # One attempt per request and no re-read of a broken body: the budget
            # retries, each retry admitted like a GET.
            settings = replace(settings, retries=1, body_retry=BodyRetry(0))
        return self._budgets.wrap(mount, open_under_store(mount.uri, settings, self._metrics))

    def probe(self, uri: str, options: MountOptions) -> UnderStore:
        """A store for `uri` outside the mount table (a mount being checked), with one
        attempt per request, so a wrong endpoint is reported in seconds. Blocking."""
        return open_under_store(uri, self.settings(options, retries=1), self._metrics)

    def _opened(self, mount: Mount, future: asyncio.Future[UnderStore]) -> None:
        pending = self._opening.get(mount.path)
        if pending is None or pending[1] is not future:
            return  # forgotten, or the mount changed again meanwhile: not the current store
        del self._opening[mount.path]
        if not future.cancelled() and future.exception() is None:
            self._open[mount.path] = (mount, future.result())

    def prepare(self, mount: Mount) -> None:
        """Starts opening the mount's store in the background (from a running loop); a
        store that fails to open fails the read that needs it, with the same error."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop to open it on: the first read opens it
        task = loop.create_task(self.open(mount))
        self._preparing.add(task)
        task.add_done_callback(lambda done: self._prepared(mount, done))

    def _prepared(self, mount: Mount, task: asyncio.Task[UnderStore]) -> None:
        self._preparing.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.info("under_store_not_opened", mount=mount.path, uri=mount.uri, error=str(exc))

    def is_open(self, mount: Mount) -> bool:
        """Whether the store of this mount, as it is now, is open (reads need not wait)."""
        opened = self._open.get(mount.path)
        return opened is not None and opened[0] == mount

    def forget(self, mount_path: str) -> None:
        self._open.pop(mount_path, None)
        self._opening.pop(mount_path, None)

    # ---- MountListener: the mounts a worker follows ------------------------------------

    def mount_changed(self, mount: Mount) -> None:
        self.prepare(mount)

    def mount_removed(self, mount_path: str) -> None:
        self.forget(mount_path)
        if self._budgets is not None:
            self._budgets.forget(mount_path)


def open_under_store(
    uri: str, settings: UnderStoreSettings, metrics: UnderStoreMetrics | None = None
) -> UnderStore:
    """The store for `uri` (its scheme's opener, `store_schemes`), every request timed in
    `metrics` when given."""
    store = open_store(uri, settings)
    return store if metrics is None else metrics.measure(store)
