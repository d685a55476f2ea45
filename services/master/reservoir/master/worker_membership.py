"""The workers as the leader sees them: who is registered, in which state (serving,
draining, drained), under which lease (their block locations are written under it), and
who just joined (a worker that joins is given its share of what is cached: a fill job)."""

from __future__ import annotations

from dataclasses import dataclass, field

from reservoir.common import logs
from reservoir.common.errors import NotFound
from reservoir.common.metadata.metadata_store import Lease, MetadataStore
from reservoir.common.metadata.worker_registry import WorkerRegistry
from reservoir.common.models import WorkerRecord

from .locations import BlockLocationTable

log = logs.get_logger(__name__)


@dataclass
class Changes:
    """What changed in the membership between two looks."""

    joined: list[WorkerRecord] = field(default_factory=list)
    # Per serving worker that left (died, or stopped without a drain): the blocks it held
    # that other workers hold too, by file. Each is one copy short now.
    lost_replicas: dict[str, dict[str, list[int]]] = field(default_factory=dict)


class WorkerMembership:
    def __init__(self, store: MetadataStore, locations: BlockLocationTable) -> None:
        self._registry = WorkerRegistry(store)
        self._locations = locations
        self.leases: dict[str, Lease] = {}
        # The workers at the last refresh, and whether each served; None until this
        # leader's first one (a worker it had not seen by then did not just join).
        self._known: dict[str, bool] | None = None

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

    async def refresh(self) -> Changes:
        """Reads who is registered now; returns what changed since the last look."""
        live = await self._registry.live()
        self.leases = {w.id: Lease(w.lease_id, 0) for w in live}
        changes = Changes()
        if self._known is not None:
            changes.joined = [w for w in live if w.serving and not self._known.get(w.id)]
            for worker_id, serving in self._known.items():
                # A drained worker's blocks were copied before it left: nothing is owed.
                if serving and worker_id not in self.leases:
                    log.warning("worker_lost", worker=worker_id)
                    owed = self._replicated(worker_id)
                    if owed:
                        changes.lost_replicas[worker_id] = owed
        self._locations.prune(set(self.leases))
        self._known = {w.id: w.serving for w in live}
        for worker in changes.joined:
            log.info("worker_joined", worker=worker.id, address=worker.address)
        return changes

    def _replicated(self, worker_id: str) -> dict[str, list[int]]:
        """The blocks `worker_id` held that another worker holds too: kept on more than
        one worker (replicas, pins), they lost a copy with it."""
        owed: dict[str, list[int]] = {}
        for file_id, indices in self._locations.held_by(worker_id).items():
            holders = self._locations.holders(file_id)
            shared = [i for i in indices if len(holders.get(i, ())) >= 2]
            if shared:
                owed[file_id] = shared
        return owed

    async def mark(self, worker: WorkerRecord, state: str) -> WorkerRecord:
        marked = await self._registry.mark(worker, state)
        log.info("worker_marked", worker=worker.id, state=state)
        return marked

    async def forget_marks(self) -> None:
        await self._registry.forget_marks(await self._registry.live())
