"""The asyncio read path's hedges (the real BlockReader, planner, penalty box and hedge
bound; workers and the under-store are in-process stand-ins, one of which never answers,
as a SIGSTOPped worker does not)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from reservoir.client.block_reader import BlockReader
from reservoir.client.block_source import Outcome
from reservoir.client.hedges import Hedges
from reservoir.client.penalty_box import PenaltyBox
from reservoir.common import config as cfg
from reservoir.common.errors import ReservoirError, Unavailable
from reservoir.common.models import Inode, WorkerRecord
from tests.unit.read_path_fakes import CONFIG, Source, View, held_by, planner, worker

A, B = worker("a"), worker("b")
# A budget short enough for a test, still longer than a stand-in takes to answer.
HEDGED = dataclasses.replace(
    CONFIG, read_hedge_floor_s=0.01, read_hedge_after_s=0.05, read_hedge_cold_after_s=0.05
)


class AsyncView:
    """What the asyncio read path asks of the cluster view (the fake's, made async)."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.penalties = view.penalties

    async def workers(self, fresh: bool) -> list[WorkerRecord]:
        return self.view.workers

    def worker_failed(self, w: WorkerRecord, error: ReservoirError) -> None:
        self.view.worker_failed(w, error)

    @property
    def failed(self) -> list[str]:
        return self.view.failed


class Workers:
    """Workers over "gRPC": each answers its name's first letter, a silent one never (its
    call waits until it is cancelled), a late one after `late_s`."""

    def __init__(self, silent: set[str], late_s: float = 0.0) -> None:
        self.silent = silent
        self.late_s = late_s
        self.asked: list[str] = []
        self.cancelled: list[str] = []

    async def fetch(
        self,
        w: WorkerRecord,
        inode: Inode,
        index: int,
        offset: int,
        length: int,
        first_byte: Callable[[], None] | None = None,
    ) -> list[memoryview]:
        self.asked.append(w.id)
        if w.id in self.silent:
            try:
                if self.late_s:
                    await asyncio.sleep(self.late_s)
                else:
                    await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.append(w.id)
                raise
        if first_byte is not None:
            first_byte()
        return [memoryview(w.id[:1].encode() * inode.size)]


class UnderStore:
    def __init__(self, error: ReservoirError | None = None) -> None:
        self.asked = 0
        self.error = error

    async def fetch(
        self, inode: Inode, index: int, offset: int, length: int, cause: ReservoirError | None
    ) -> bytes:
        self.asked += 1
        if self.error is not None:
            raise self.error
        return b"s" * inode.size


def _order(workers: list[WorkerRecord], inode: Inode) -> list[str]:
    """The workers in the order the planner asks them for the block."""
    view = View(workers, PenaltyBox(60.0))
    plans = planner(
        view, Source("sc", Outcome.DECLINED, same_host=True), Source("dp", Outcome.READ)
    )
    return [w.id for w in plans.plan(inode, 0, workers).remote]


BOTH = held_by("a", "b")
FIRST, SECOND = _order([A, B], BOTH)  # placement decides which holder is asked first


def _read(
    workers: list[WorkerRecord],
    inode: Inode,
    grpc: Workers,
    config: cfg.ClientConfig = HEDGED,
    under: UnderStore | None = None,
) -> tuple[bytes, AsyncView, UnderStore, Hedges]:
    box = PenaltyBox(60.0)
    view = AsyncView(View(workers, box))
    hedges = Hedges(config, box)
    under = under or UnderStore()
    plans = planner(
        view.view, Source("sc", Outcome.DECLINED, same_host=True), Source("dp", Outcome.READ)
    )
    reader = BlockReader(config, view, plans, None, grpc, under, hedges)  # type: ignore[arg-type]
    pieces = asyncio.run(reader.read_inode_pieces(inode, 0, -1))
    return b"".join(pieces), view, under, hedges


def test_a_silent_worker_is_hedged_the_next_replica_answers_and_its_call_is_cancelled() -> None:
    grpc = Workers(silent={FIRST})
    data, view, under, hedges = _read([A, B], BOTH, grpc)
    assert data == SECOND.encode() * 100
    assert grpc.asked == [FIRST, SECOND]
    assert grpc.cancelled == [FIRST]
    assert view.failed == [FIRST]  # in the penalty box: the next reads go elsewhere first
    assert hedges.stats().hedged == 1
    assert under.asked == 0


def test_a_silent_last_worker_is_hedged_to_the_under_store() -> None:
    grpc = Workers(silent={"a"})
    data, view, under, _ = _read([A], held_by("a"), grpc)
    assert data == b"s" * 100
    assert under.asked == 1
    assert grpc.cancelled == ["a"]


def test_with_no_hedge_left_a_slow_worker_is_waited_for() -> None:
    spent = dataclasses.replace(HEDGED, read_hedge_share=0.0, read_hedge_burst=0)
    grpc = Workers(silent={FIRST}, late_s=0.2)
    data, view, under, hedges = _read([A, B], BOTH, grpc, spent)
    assert data == FIRST.encode() * 100
    assert grpc.asked == [FIRST]
    assert view.failed == []
    assert hedges.stats().refused == 1


def test_with_hedging_off_a_slow_worker_is_waited_for() -> None:
    off = dataclasses.replace(HEDGED, read_hedge_after_s=0.0)
    grpc = Workers(silent={FIRST}, late_s=0.2)
    data, _, _, hedges = _read([A, B], BOTH, grpc, off)
    assert data == FIRST.encode() * 100
    assert grpc.asked == [FIRST]
    assert hedges.stats().hedged == hedges.stats().refused == 0


def test_a_client_that_may_not_read_the_store_waits_for_its_last_worker() -> None:
    no_store = dataclasses.replace(HEDGED, ufs_fallback=False)
    grpc = Workers(silent={"a"}, late_s=0.2)
    data, view, under, hedges = _read([A], held_by("a"), grpc, no_store)
    assert data == b"a" * 100
    assert under.asked == 0
    assert hedges.stats().hedged == 0


def test_when_the_store_fails_a_hedged_worker_that_answers_late_still_wins() -> None:
    grpc = Workers(silent={"a"}, late_s=0.2)
    store = UnderStore(Unavailable("the store is down"))
    data, _, under, hedges = _read([A], held_by("a"), grpc, under=store)
    assert data == b"a" * 100
    assert under.asked == 1
    assert hedges.stats().hedged == 1
