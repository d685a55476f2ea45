"""ThreadReads, the blocking client's reads in the caller's thread, walking the real
planner's routes: which source it asks, and when it leaves a block to the full path
(recording fakes for the sources; no sockets, no files)."""

from __future__ import annotations

from typing import Any

from reservoir.client.block_source import Outcome
from reservoir.client.penalty_box import PenaltyBox
from reservoir.client.thread_reads import ThreadReads
from tests.unit.read_path_fakes import Source, View, held_by, planner, worker

BEST, NEXT = worker("best"), worker("next")
NEAR = worker("near", same_host=True)
FILE = held_by("best", "next")


def _reads(
    ports: Source, short_circuit: Source | None = None, workers: list[Any] | None = None
) -> tuple[ThreadReads, View]:
    view = View(workers or [BEST, NEXT], PenaltyBox(60.0))
    local = short_circuit or Source("sc", Outcome.DECLINED, same_host=True)
    fake: Any = (view, planner(view, local, ports), local, ports)
    return ThreadReads(*fake), view


def test_a_block_the_best_worker_declines_goes_the_full_path_not_to_another_workers_port() -> None:
    ports = Source("dp", Outcome.DECLINED)  # e.g. the block failed its checksum on the way
    reads, view = _reads(ports)
    for _ in range(3):
        assert not reads.read_into(FILE, 0, memoryview(bytearray(FILE.size)))
    # The worker is fine (it answered): nobody is penalised, the full path asks it again.
    assert ports.asked == ["best", "best", "best"] and view.failed == []


def test_a_worker_whose_port_is_unreachable_is_penalised_and_asked_after_the_others() -> None:
    ports = Source("dp", Outcome.UNREACHABLE)
    reads, view = _reads(ports)
    for _ in range(3):
        assert not reads.read_into(FILE, 0, memoryview(bytearray(FILE.size)))
    # The box is the full path's too: both routes now ask `next` first, then nobody's port.
    assert ports.asked == ["best", "next"] and view.failed == ["best", "next"]


def test_a_block_read_over_the_best_workers_port_lands_in_the_callers_buffer() -> None:
    ports = Source("dp", Outcome.READ)
    out = bytearray(FILE.size)
    assert _reads(ports)[0].read_into(FILE, 0, memoryview(out))
    assert out == b"d" * FILE.size and ports.asked == ["best"]


def test_a_same_host_block_file_is_read_before_any_port_and_a_miss_there_falls_to_the_port() -> (
    None
):
    ports = Source("dp", Outcome.READ)
    local = Source("sc", Outcome.READ, same_host=True)
    reads, _ = _reads(ports, local, [NEAR, BEST])
    out = bytearray(10)
    assert reads.read_into(held_by("near", "best", size=10), 0, memoryview(out))
    assert out == b"s" * 10 and local.asked == ["near"] and ports.asked == []
    local.outcome = Outcome.DECLINED  # evicted there since
    assert reads.read_into(held_by("near", "best", size=10), 0, memoryview(out))
    assert out == b"d" * 10 and ports.asked == ["best"]


def test_read_many_pipelines_to_ports_and_leaves_what_failed_to_the_full_path() -> None:
    ports = Source("dp", Outcome.READ)
    reads, _ = _reads(ports)
    ok = held_by("best", size=5)
    big = held_by("best", size=5000)  # more than one block: not for read_many here
    assert reads.read_many([ok, big]) == [b"ddddd", None]


def test_a_block_missing_from_a_same_host_file_goes_to_that_workers_port_only_when_asked() -> None:
    ports = Source("dp", Outcome.READ)
    local = Source("sc", Outcome.DECLINED, same_host=True)  # not cached there (yet)
    reads, _ = _reads(ports, local, [NEAR])
    cold = held_by("near", size=10)
    out = bytearray(10)
    # By default a cold block on this host is the full path's (gRPC fetches the miss).
    assert not reads.read_into(cold, 0, memoryview(out)) and ports.asked == []
    # Asked to, the same-host worker's data port fetches it.
    assert reads.asking_same_host_ports().read_into(cold, 0, memoryview(out))
    assert out == b"d" * 10 and local.asked == ["near", "near"] and ports.asked == ["near"]


def test_a_penalised_same_host_worker_is_not_asked_on_its_port() -> None:
    ports = Source("dp", Outcome.UNREACHABLE)
    local = Source("sc", Outcome.DECLINED, same_host=True)
    reads, view = _reads(ports, local, [NEAR])
    same_host = reads.asking_same_host_ports()
    cold = held_by("near", size=10)
    for _ in range(2):
        assert not same_host.read_into(cold, 0, memoryview(bytearray(10)))
    assert ports.asked == ["near"] and view.failed == ["near"]


def test_block_files_only_reads_a_same_host_file_and_never_asks_a_port() -> None:
    ports = Source("dp", Outcome.READ)
    local = Source("sc", Outcome.READ, same_host=True)
    reads, _ = _reads(ports, local, [NEAR, BEST])
    files = reads.block_files_only()
    assert files.read_inode_bytes(held_by("near", size=10), 0, 10) == b"s" * 10
    local.outcome = Outcome.DECLINED
    assert files.read_inode_bytes(held_by("near", size=10), 0, 10) is None
    assert files.read_inode_bytes(held_by("best", size=10), 0, 10) is None
    assert ports.asked == []


def test_read_many_reads_same_host_files_in_one_turn() -> None:
    ports = Source("dp", Outcome.READ)
    local = Source("sc", Outcome.READ, same_host=True)
    reads, _ = _reads(ports, local, [NEAR, BEST])
    near = [held_by("near", size=n) for n in (3, 4, 5)]
    assert reads.read_many(near) == [b"sss", b"ssss", b"sssss"]
    assert local.turns == 1 and local.asked == ["near"] * 3 and ports.asked == []
