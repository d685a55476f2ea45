"""Worker membership: each worker's record lives under its own lease; an operator's mark
(draining, drained) lives beside it, written by the leader.

A mark names the worker process it was put on (`started_ms`): it survives that worker
re-registering (a lost lease) but not a new process under the same id, which starts
serving — a node back from maintenance is not drained again by an old mark."""

from __future__ import annotations

import json
from dataclasses import replace

from reservoir.common.errors import InvalidArgument
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import Lease, MetadataStore
from reservoir.common.models import SERVING, WORKER_STATES, WorkerRecord


class WorkerRegistry:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def register(self, record: WorkerRecord, ttl_s: int) -> tuple[WorkerRecord, Lease]:
        """Publishes `record` under a new lease; it vanishes when the lease does."""
        lease = await self._store.grant_lease(ttl_s)
        record = replace(record, lease_id=lease.id, state=SERVING)
        await self._store.put(keyspace.worker_key(record.id), record.to_json(), lease)
        return record, lease

    async def live(self) -> list[WorkerRecord]:
        """The registered workers, each in the state its mark gives it (serving without)."""
        pairs = await self._store.get_prefix(keyspace.WORKERS)
        marks = {
            key[len(keyspace.WORKER_MARKS) :].decode(): json.loads(value)
            for key, value in await self._store.get_prefix(keyspace.WORKER_MARKS)
        }
        found = []
        for _, value in pairs:
            record = WorkerRecord.from_json(value)
            mark = marks.get(record.id)
            if mark is not None and mark.get("started_ms") == record.started_ms:
                record = replace(record, state=mark["state"])
            found.append(record)
        return found

    async def mark(self, worker: WorkerRecord, state: str) -> WorkerRecord:
        """Puts `worker` (this process of it) in `state`; SERVING takes the mark away."""
        if state not in WORKER_STATES:
            raise InvalidArgument(f"unknown worker state {state!r}")
        key = keyspace.worker_mark_key(worker.id)
        if state == SERVING:
            await self._store.delete(key)
        else:
            mark = {"state": state, "started_ms": worker.started_ms}
            await self._store.put(key, json.dumps(mark).encode())
        return replace(worker, state=state)

    async def forget_marks(self, live: list[WorkerRecord]) -> None:
        """Drops the marks of workers that are gone or restarted (a mark is for a process)."""
        by_id = {w.id: w for w in live}
        stale = []
        for key, value in await self._store.get_prefix(keyspace.WORKER_MARKS):
            worker = by_id.get(key[len(keyspace.WORKER_MARKS) :].decode())
            if worker is None or json.loads(value).get("started_ms") != worker.started_ms:
                stale.append(key)
        if stale:
            await self._store.delete_many(stale)
