"""ShortCircuit's turns: short same-host reads from several threads run one at a time
(each would otherwise hand the GIL to another thread per system call), long ones do not
wait; real block files in a temporary directory."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

from reservoir.client.block_source import Outcome
from reservoir.client.short_circuit import TURN_BYTES, ShortCircuit
from reservoir.common import config as cfg
from reservoir.common.blocks.block_file import checksum, write_block_file
from reservoir.common.models import Inode, WorkerRecord, shm_block_name

HOST = "here"


def _cached(tmp_path: Path, file_id: str, data: bytes) -> Inode:
    inode = Inode(f"/m/{file_id}", False, size=len(data), block_size=8 << 20, file_id=file_id)
    write_block_file(str(tmp_path / shm_block_name(file_id, 0)), data, checksum(data), 0)
    return dataclasses.replace(inode, mount_path="/m")


def _read_in_thread(
    source: ShortCircuit, worker: WorkerRecord, inode: Inode
) -> tuple[threading.Event, list[Outcome]]:
    done, outcomes = threading.Event(), []

    def read() -> None:
        outcomes.append(source.read_into(worker, inode, 0, 0, memoryview(bytearray(inode.size))))
        done.set()

    threading.Thread(target=read, daemon=True).start()
    return done, outcomes


def test_a_short_read_waits_for_another_threads_turn_and_a_long_one_does_not(
    tmp_path: Path,
) -> None:
    source = ShortCircuit(cfg.ClientConfig(master="m:1", host=HOST))
    worker = WorkerRecord("w", "w:1", host=HOST, shm_dir=str(tmp_path))
    short = _cached(tmp_path, "short", b"s" * 1000)
    long = _cached(tmp_path, "long", b"l" * (TURN_BYTES + 1))
    with source.turn():
        waiting, _ = _read_in_thread(source, worker, short)
        running, long_outcome = _read_in_thread(source, worker, long)
        assert running.wait(10) and long_outcome == [Outcome.READ]
        assert not waiting.wait(0.3)
        # The thread holding the turn reads on: the turn is its own.
        out = bytearray(short.size)
        assert source.read_into(worker, short, 0, 0, memoryview(out)) is Outcome.READ
        assert out == b"s" * 1000
    assert waiting.wait(10)
