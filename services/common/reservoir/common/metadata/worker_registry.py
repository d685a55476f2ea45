"""Worker membership: each worker's record lives under its own lease."""

from __future__ import annotations

from dataclasses import replace

from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import Lease, MetadataStore
from reservoir.common.models import WorkerRecord


class WorkerRegistry:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def register(self, record: WorkerRecord, ttl_s: int) -> tuple[WorkerRecord, Lease]:
        """Publishes `record` under a new lease; it vanishes when the lease does."""
        lease = await self._store.grant_lease(ttl_s)
        record = replace(record, lease_id=lease.id)
        await self._store.put(keyspace.worker_key(record.id), record.to_json(), lease)
        return record, lease

    async def live(self) -> list[WorkerRecord]:
        pairs = await self._store.get_prefix(keyspace.WORKERS)
        return [WorkerRecord.from_json(value) for _, value in pairs]
