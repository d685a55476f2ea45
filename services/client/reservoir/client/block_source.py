"""How a client gets one block's bytes: the routes it may take and the one planner that
picks them, for the blocking client's reads in the caller's thread (`ThreadReads`) and the
asyncio client's on its event loop (`BlockReader`) alike.

    plan(block) = same-host workers' block files  (ShortCircuit, in the caller's process)
                → the best other worker's data port (DataPortReader, caller's thread only)
                → each worker over gRPC, best first (GrpcBlocks, on the event loop)
                → the under-store                  (UnderStoreBlocks, the last resort)

Workers come nearest first: the block's replicas (as the master last told this client:
same host, same zone, the rest; homes first among equals), then its homes that do not hold
it in placement order, those in the penalty box last. A route that reads in the caller's
thread is a `BlockSource`."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from reservoir.common import config as cfg
from reservoir.common.models import Inode, WorkerRecord
from reservoir.common.placement import Placement

from .penalty_box import PenaltyBox
from .routing import candidates

_PLANS_REMEMBERED = 100_000  # blocks whose plan is kept (then forgotten at once)


class Outcome(enum.Enum):
    """How one read of a block by a `BlockSource` ended."""

    READ = "read"  # the bytes are in `out`, length and checksum checked
    # No bytes from this source (not held there, an error, a checksum mismatch), but the
    # worker is fine: the next route asks again, where the worker repairs or reports it.
    DECLINED = "declined"
    UNREACHABLE = "unreachable"  # no connection, or it broke: the worker is penalised


class BlockSource(Protocol):
    """A route that reads a block range in the caller's thread, straight into its buffer."""

    def reaches(self, worker: WorkerRecord) -> bool: ...

    def read_into(
        self, worker: WorkerRecord, inode: Inode, index: int, offset: int, out: memoryview
    ) -> Outcome: ...


class Placements(Protocol):
    """Where blocks live: the homes placement gives them, and the replicas known to hold
    them (block index -> worker ids, from the master's last answer about the file)."""

    def placement(self, workers: list[WorkerRecord]) -> Placement: ...

    def replicas(self, inode: Inode) -> dict[int, list[str]]: ...


@dataclass(frozen=True, slots=True)
class Plan:
    local: tuple[WorkerRecord, ...]  # same-host workers: their block files, in order
    port: WorkerRecord | None  # the data port to ask: the best worker elsewhere, if any
    remote: tuple[WorkerRecord, ...]  # every candidate over gRPC, best first


class Planner:
    def __init__(
        self,
        config: cfg.ClientConfig,
        placements: Placements,
        penalties: PenaltyBox,
        short_circuit: BlockSource,
        data_port: BlockSource,
    ) -> None:
        self._config = config
        self._placements = placements
        self.penalties = penalties
        self.short_circuit = short_circuit
        self.data_port = data_port
        # Per block: the replica list its plan was made from, and the plan.
        self._plans: dict[tuple[str, int], tuple[list[str] | None, Plan]] = {}
        self._plans_for: list[WorkerRecord] | None = None

    def plan(self, inode: Inode, index: int, workers: list[WorkerRecord]) -> Plan:
        """The routes to block `index`, best first. Remembered per block and worker list
        while nobody is penalised and the block's known replicas stay the same: working
        them out costs more than reading a small block file."""
        held = (inode.locations or self._placements.replicas(inode)).get(index)
        if not self.penalties.empty():
            return self._planned(inode, index, workers, held)
        if self._plans_for is not workers or len(self._plans) >= _PLANS_REMEMBERED:
            self._plans, self._plans_for = {}, workers
        key = (inode.file_id, index)
        known = self._plans.get(key)
        # The same list object: the view replaces it when the master tells of new replicas.
        if known is not None and known[0] is held:
            return known[1]
        plan = self._planned(inode, index, workers, held)
        self._plans[key] = (held, plan)
        return plan

    def _planned(
        self, inode: Inode, index: int, workers: list[WorkerRecord], held: list[str] | None
    ) -> Plan:
        order = self.penalties.healthy_first(
            candidates(
                inode.file_id,
                index,
                workers,
                held or (),
                self._config.host,
                self._config.zone,
                self._placements.placement(workers),
                self._config.failover_workers,
            )
        )
        local = tuple(w for w in order if self.short_circuit.reaches(w))
        port = next(
            (w for w in order if not self.short_circuit.reaches(w) and self.data_port.reaches(w)),
            None,
        )
        if port is not None and self.penalties.holds(port.id):
            port = None  # choosing another replica is gRPC's to do, which knows why
        return Plan(local, port, tuple(order))
