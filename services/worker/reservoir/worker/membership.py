"""Keeps this worker registered in etcd under a lease; re-registers if the lease is lost."""

from __future__ import annotations

from reservoir.common import logs
from reservoir.common.config import WorkerConfig
from reservoir.common.errors import NotFound
from reservoir.common.metadata.metadata_store import Lease, MetadataStore
from reservoir.common.metadata.worker_registry import WorkerRegistry
from reservoir.common.models import WorkerRecord

from .block_reporter import BlockReporter

log = logs.get_logger(__name__)


class Membership:
    def __init__(
        self,
        store: MetadataStore,
        record: WorkerRecord,
        config: WorkerConfig,
        reporter: BlockReporter,
    ) -> None:
        self._registry = WorkerRegistry(store)
        self._store = store
        self._record = record
        self._config = config
        self._reporter = reporter
        self.lease: Lease | None = None

    async def register(self) -> None:
        self._record, self.lease = await self._registry.register(
            self._record, self._config.lease_ttl_s
        )
        # A new lease: the locations written under the old one are gone from etcd.
        self._reporter.request_full("registered")
        log.info("worker_registered", worker=self._record.id, lease=self.lease.id)

    async def keepalive(self) -> None:
        if self.lease is None:
            await self.register()
            return
        try:
            await self._store.refresh_lease(self.lease)
        except NotFound:
            log.warning("worker_lease_lost", worker=self._record.id)
            await self.register()

    async def leave(self) -> None:
        if self.lease is not None:
            await self._store.revoke_lease(self.lease)
