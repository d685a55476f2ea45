"""How a client gets one block's bytes: the routes it may take and the one planner that
picks them, for the blocking client's reads in the caller's thread (`ThreadReads`) and the
asyncio client's on its event loop (`BlockReader`) alike.

    plan(block) = same-host workers' block files  (ShortCircuit, in the caller's process)
                → the best other worker's data port (DataPortReader, caller's thread only)
                → each worker over gRPC, best first (GrpcBlocks, on the event loop)
                → the under-store                  (UnderStoreBlocks, the last resort)

Workers come in placement order (holders nearest first, then the block's homes), those in
the penalty box last. A route that reads in the caller's thread is a `BlockSource`."""

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
    def placement(self, workers: list[WorkerRecord]) -> Placement: ...


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
        self._plans: dict[tuple[str, int], Plan] = {}
        self._plans_for: list[WorkerRecord] | None = None

    def plan(self, inode: Inode, index: int, workers: list[WorkerRecord]) -> Plan:
        """The routes to block `index`, best first. Remembered per block and worker list
        while nobody is penalised: working them out costs more than reading a small
        block file."""
        if not self.penalties.empty():
            return self._planned(inode, index, workers)
        if self._plans_for is not workers or len(self._plans) >= _PLANS_REMEMBERED:
            self._plans, self._plans_for = {}, workers
        key = (inode.file_id, index)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._planned(inode, index, workers)
        return plan

    def _planned(self, inode: Inode, index: int, workers: list[WorkerRecord]) -> Plan:
        order = self.penalties.healthy_first(
            candidates(
                inode.file_id,
                index,
                workers,
                inode.locations.get(index, ()),
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
