"""In-process stand-ins for what the client's read planner talks to (a cluster view and
block sources that record what they were asked): no sockets, no files, no servers."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from reservoir.client.block_source import Outcome, Planner
from reservoir.client.data_port import BlockRead
from reservoir.client.penalty_box import PenaltyBox
from reservoir.common import config as cfg
from reservoir.common.errors import ReservoirError
from reservoir.common.models import Inode, WorkerRecord
from reservoir.common.placement import Placement, placement_of

HOST = "this-host"
ZONE = "this-zone"
CONFIG = cfg.ClientConfig(host=HOST, zone=ZONE, failover_workers=3)


class View:
    """The cluster view's part in reads: the workers, and who hears of a failure."""

    def __init__(self, workers: list[WorkerRecord], penalties: PenaltyBox) -> None:
        self.workers = workers
        self.penalties = penalties
        self.failed: list[str] = []
        self.held: dict[str, dict[int, list[str]]] = {}  # file id -> replicas, as told

    def known_workers(self) -> list[WorkerRecord]:
        return self.workers

    def known_inode(self, path: str) -> Inode | None:
        return None

    def placement(self, workers: list[WorkerRecord]) -> Placement:
        return placement_of(workers)

    def replicas(self, inode: Inode) -> dict[int, list[str]]:
        return self.held.get(inode.file_id, {})

    def worker_failed(self, worker: WorkerRecord, error: ReservoirError) -> None:
        self.failed.append(worker.id)
        self.penalties.penalise(worker.id)


class Source:
    """A block source answering `outcome` from the workers it reaches (all with a data
    address, or those on this host with `same_host`), filling `out` with its name."""

    def __init__(self, name: str, outcome: Outcome, *, same_host: bool = False) -> None:
        self.name = name
        self.outcome = outcome
        self.same_host = same_host
        self.asked: list[str] = []
        self.turns = 0  # batches read in one turn (ShortCircuit.turn)

    @contextmanager
    def turn(self) -> Iterator[None]:
        self.turns += 1
        yield

    def reaches(self, worker: WorkerRecord) -> bool:
        if self.same_host:
            return worker.host == HOST and bool(worker.shm_dir)
        return bool(worker.data_address)

    def read_into(
        self, worker: WorkerRecord, inode: Inode, index: int, offset: int, out: memoryview
    ) -> Outcome:
        self.asked.append(worker.id)
        if self.outcome is Outcome.READ:
            out[:] = self.name[:1].encode() * len(out)
        return self.outcome

    def read_all_into(self, reads: Sequence[BlockRead]) -> None:
        """The data port's pipelined reads of many, one by one here."""
        for read in reads:
            read.outcome = self.read_into(
                read.worker, read.inode, read.index, read.offset, read.out
            )


def worker(
    name: str, *, same_host: bool = False, same_zone: bool = False, port: bool = True
) -> WorkerRecord:
    return WorkerRecord(
        name,
        f"{name}:1",
        host=HOST if same_host else f"{name}-host",
        zone=ZONE if same_host or same_zone else f"{name}-zone",
        shm_dir="/dev/shm/x" if same_host else "",
        data_address=f"{name}:2" if port else "",
    )


def held_by(*names: str, size: int = 100) -> Inode:
    """A one-block file whose block the named workers hold, in that order."""
    inode = Inode("/m/f", False, size=size, block_size=1000, file_id="f1", mount_path="/m")
    return dataclasses.replace(inode, locations={0: list(names)})


def planner(view: View, short_circuit: Source, data_port: Source) -> Planner:
    return Planner(CONFIG, view, view.penalties, short_circuit, data_port)
