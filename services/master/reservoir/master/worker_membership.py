"""The workers as the leader sees them: who is registered, in which state (serving,
draining, drained), under which lease (their block locations are written under it), and
who just joined (a worker that joins is given its share of what is cached: a fill job)."""

from __future__ import annotations

from reservoir.common import logs
from reservoir.common.errors import NotFound
from reservoir.common.metadata.metadata_store import Lease, MetadataStore
from reservoir.common.metadata.worker_registry import WorkerRegistry
from reservoir.common.models import WorkerRecord

from .locations import BlockLocationTable

log = logs.get_logger(__name__)


class WorkerMembership:
    def __init__(self, store: MetadataStore, locations: BlockLocationTable) -> None:
        self._registry = WorkerRegistry(store)
        self._locations = locations
        self.leases: dict[str, Lease] = {}
        # The serving workers at the last refresh; None until this leader's first one (a
        # worker it has not seen before then did not just join).
        self._known: set[str] | None = None

    async def workers(self) -> list[WorkerRecord]:
        return sorted(await self._registry.live(), key=lambda w: w.id)

    async def worker(self, worker_id: str) -> WorkerRecord:
        for worker in await self.workers():
            if worker.id == worker_id:
                return worker
        raise NotFound(f"no worker {worker_id!r} is registered (see `reservoir workers`)")

    def restart(self) -> None:
        """A new term: who joined is counted from this leader's first look."""
        self._known = None

    async def refresh(self) -> list[WorkerRecord]:
        """Reads who is registered now; returns the workers that joined (or came back to
        service) since the last look."""
        live = await self._registry.live()
        self.leases = {w.id: Lease(w.lease_id, 0) for w in live}
        self._locations.prune(set(self.leases))
        serving = {w.id for w in live if w.serving}
        joined = [] if self._known is None else [w for w in live if w.id in serving - self._known]
        self._known = serving
        for worker in joined:
            log.info("worker_joined", worker=worker.id, address=worker.address)
        return joined

    async def mark(self, worker: WorkerRecord, state: str) -> WorkerRecord:
        marked = await self._registry.mark(worker, state)
        log.info("worker_marked", worker=worker.id, state=state)
        return marked

    async def forget_marks(self) -> None:
        await self._registry.forget_marks(await self._registry.live())
