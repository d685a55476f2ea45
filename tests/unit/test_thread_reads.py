"""ThreadReads, the blocking client's reads in the caller's thread: which worker's data
port it asks, and when it leaves a block to the full path (in-process fakes; no sockets)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from reservoir.client.data_port import Outcome
from reservoir.client.thread_reads import ThreadReads
from reservoir.common.models import Inode, WorkerRecord

BEST = WorkerRecord("best", "127.0.0.1:1", data_address="127.0.0.1:2")
NEXT = WorkerRecord("next", "127.0.0.1:3", data_address="127.0.0.1:4")
FILE = Inode("/m/f", False, size=100, block_size=1000, file_id="f1", mount_path="/m")


class _View:
    config = SimpleNamespace(workers_ttl_s=60.0)

    def known_workers(self) -> list[WorkerRecord]:
        return WORKERS


WORKERS = [BEST, NEXT]


class _Ranking:
    def ordered(self, inode: Inode, index: int, workers: list[WorkerRecord]) -> list[WorkerRecord]:
        return [BEST, NEXT]


class _NotOnThisHost:
    def reaches(self, worker: WorkerRecord) -> bool:
        return False


class _DataPorts:
    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.asked: list[str] = []

    def reaches(self, worker: WorkerRecord) -> bool:
        return True

    def read_into(
        self, worker: WorkerRecord, inode: Inode, index: int, offset: int, out: memoryview
    ) -> Outcome:
        self.asked.append(worker.id)
        if self.outcome is Outcome.READ:
            out[:] = b"x" * len(out)
        return self.outcome


def _reads(ports: _DataPorts) -> ThreadReads:
    fake: Any = (_View(), _Ranking(), _NotOnThisHost(), ports)
    return ThreadReads(*fake)


def test_a_block_the_best_worker_declines_goes_the_full_path_not_to_another_workers_port() -> None:
    ports = _DataPorts(Outcome.DECLINED)  # e.g. the block failed its checksum on the way
    reads = _reads(ports)
    for _ in range(3):
        assert not reads.read_into(FILE, 0, memoryview(bytearray(FILE.size)))
    # The next worker may not hold the block: asking it would cost an S3 GET there.
    assert ports.asked == ["best", "best", "best"]


def test_a_worker_whose_port_is_unreachable_is_left_be_and_its_blocks_go_the_full_path() -> None:
    ports = _DataPorts(Outcome.UNREACHABLE)
    reads = _reads(ports)
    for _ in range(3):
        assert not reads.read_into(FILE, 0, memoryview(bytearray(FILE.size)))
    assert ports.asked == ["best"]


def test_a_block_read_over_the_best_workers_port_lands_in_the_callers_buffer() -> None:
    ports = _DataPorts(Outcome.READ)
    out = bytearray(FILE.size)
    assert _reads(ports).read_into(FILE, 0, memoryview(out))
    assert out == b"x" * FILE.size and ports.asked == ["best"]
