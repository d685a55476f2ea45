"""Reads the blocking client answers in the caller's own thread, with no hop through the
event loop: the inode and the worker list come from what `ClusterView` already knows (while
fresh), the bytes by the planner's routes that read in this thread (`block_source.py`: a
same-host worker's block file, else the best other worker's data port), straight into the
buffer the read returns. Anything else — a cold inode, a block whose plan goes on to gRPC,
a failure — answers None (or False), and the caller takes the full path on the event loop
(`BlockReader`: gRPC, failover, the under-store), which also decides what error, if any,
the reader sees.

Many threads call this at once (a DataLoader's workers, a thread pool of readers); what they
share is read-only here (dict reads under the GIL) except the counters, which lock."""

from __future__ import annotations

import copy
from collections.abc import Sequence

from reservoir.common.blocks.fresh_bytes import filled_bytes
from reservoir.common.errors import Unavailable
from reservoir.common.models import Inode, WorkerRecord

from .block_source import Outcome, Plan, Planner
from .cluster_view import ClusterView
from .data_port import BlockRead, DataPortReader
from .short_circuit import TURN_BYTES, ShortCircuit

# A range of one block to read into a buffer: (inode, block index, offset in the block, out).
_Part = tuple[Inode, int, int, memoryview]


class ThreadReads:
    def __init__(
        self,
        view: ClusterView,
        planner: Planner,
        short_circuit: ShortCircuit,
        data_port: DataPortReader,
    ) -> None:
        self._view = view
        self._planner = planner
        self._short_circuit = short_circuit  # the planner's, with its turns for batches
        self._data_port = data_port  # the planner's, with its pipelined reads of many
        self._same_host_ports = False  # see `asking_same_host_ports`
        self._ports = True  # see `block_files_only`
        self._checked: tuple[list[WorkerRecord], bool] | None = None

    def asking_same_host_ports(self) -> ThreadReads:
        """These reads, but a block that a same-host worker's file does not hold (yet) is
        then asked of that worker's data port, which fetches a miss from the under-store,
        where these leave it to the full path. For a reader whose threads may wait on
        cold reads (the S3 gateway's): one plain socket round trip instead of a gRPC call."""
        reads = copy.copy(self)
        reads._same_host_ports = True
        return reads

    def block_files_only(self) -> ThreadReads:
        """These reads from same-host workers' block files alone, never a socket, so
        they never wait on the network (safe on an event loop): any other block is None."""
        reads = copy.copy(self)
        reads._ports = False
        return reads

    def knows_workers(self) -> bool:
        return self._view.known_workers() is not None

    def can_read(self) -> bool:
        """Whether reads here are possible at all (a worker this thread reaches)."""
        return self._workers() is not None

    def known_inode(self, path: str) -> Inode | None:
        return self._view.known_inode(path)

    def _workers(self) -> list[WorkerRecord] | None:
        """The worker list when this thread can read from one of them (checked once
        per list, not per read: the view replaces the list object when it renews it)."""
        workers = self._view.known_workers()
        if not workers:
            return None
        checked = self._checked
        if checked is None or checked[0] is not workers:
            reach = any(
                self._short_circuit.reaches(w) or self._data_port.reaches(w) for w in workers
            )
            checked = self._checked = (workers, reach)
        return workers if checked[1] else None

    def read_inode_bytes(self, inode: Inode, offset: int, length: int) -> bytes | None:
        """The range as one `bytes`, each block read straight into it: one copy of each
        byte (file or socket to the result), where pieces joined afterwards cost two."""
        workers = self._workers()
        if workers is None:
            return None
        end = inode.size if length < 0 else min(inode.size, offset + length)
        return self._bytes(inode, offset, end, workers) if offset < end else b""

    def _bytes(
        self, inode: Inode, offset: int, end: int, workers: list[WorkerRecord]
    ) -> bytes | None:
        return filled_bytes(end - offset, lambda out: self._read_into(inode, offset, out, workers))

    def read_into(self, inode: Inode, offset: int, out: memoryview) -> bool:
        """Bytes [offset, offset+len(out)) of the file straight into `out` (which must not
        reach past the end of the file): True when every block of it could be read here,
        False otherwise (`out` is then undefined)."""
        workers = self._workers()
        return workers is not None and self._read_into(inode, offset, out, workers)

    def _read_into(
        self, inode: Inode, offset: int, out: memoryview, workers: list[WorkerRecord]
    ) -> bool:
        if offset + len(out) > inode.size:
            raise ValueError("read past the end of the file")
        if not out:
            return True
        block_size = inode.block_size
        end = offset + len(out)
        index = offset // block_size
        if index == (end - 1) // block_size:  # one block: most reads of small files
            plan = self._planner.plan(inode, index, workers)
            return self._block_into(plan, inode, index, offset - index * block_size, out)
        parts: list[_Part] = []
        filled = 0
        for index, start, length in inode.block_spans(offset, end):
            parts.append((inode, index, start, out[filled : filled + length]))
            filled += length
        return all(self._parts_into(parts, workers))

    def read_many(self, inodes: Sequence[Inode]) -> list[bytes | None]:
        """Whole contents of many files of one block each (the small files of a batch),
        read here: requests pipelined to each worker's data port, same-host files read
        directly. None for a file not read (a larger one, a directory, a failure): the
        caller reads those the full way."""
        results: list[bytes | None] = [None] * len(inodes)
        workers = self._workers()
        if workers is None:
            return results
        rest: list[tuple[int, Inode]] = []  # same-host files to read after the turn
        positions: list[int] = []
        parts: list[_Part] = []
        # One pass plans the batch and reads its short same-host files straight into the
        # bytes returned, in one turn (planning is Python only: no wait under the lock).
        # The rest, and what those files could not give, by every route this thread has,
        # after the turn (a data port may keep it waiting).
        with self._short_circuit.turn():
            for position, inode in enumerate(inodes):
                if inode.is_dir or inode.size > inode.block_size:
                    continue
                if inode.size == 0:
                    results[position] = b""
                    continue
                plan = self._planner.plan(inode, 0, workers)
                if plan.local:
                    if inode.size <= TURN_BYTES:
                        results[position] = self._file_bytes(plan.local, inode)
                    if results[position] is None:
                        rest.append((position, inode))
                elif plan.port is not None:
                    positions.append(position)
                    parts.append((inode, 0, 0, memoryview(bytearray(inode.size))))
        for position, inode in rest:
            results[position] = self._bytes(inode, 0, inode.size, workers)
        done = self._parts_into(parts, workers)
        for position, part, read in zip(positions, parts, done, strict=True):
            results[position] = bytes(part[3]) if read else None
        return results

    def _file_bytes(self, holders: tuple[WorkerRecord, ...], inode: Inode) -> bytes | None:
        """A one-block file whole from the first same-host worker's file that holds it."""
        source = self._short_circuit
        return filled_bytes(
            inode.size,
            lambda out: any(source.read_into(w, inode, 0, 0, out) is Outcome.READ for w in holders),
        )

    def _parts_into(self, parts: list[_Part], workers: list[WorkerRecord]) -> list[bool]:
        """Which parts were read here: those whose plan starts at a data port pipelined
        (one round trip per worker, not one per block), the others one by one."""
        done = [False] * len(parts)
        reads: list[BlockRead] = []
        at: list[int] = []
        for i, part in enumerate(parts):
            plan = self._planner.plan(part[0], part[1], workers)
            if plan.local or plan.port is None or not self._ports:
                done[i] = self._block_into(plan, *part)
            else:
                reads.append(BlockRead(plan.port, *part))
                at.append(i)
        if reads:
            self._data_port.read_all_into(reads)
            for i, read in zip(at, reads, strict=True):
                done[i] = read.done
            self._unreachable(
                {r.worker.id: r.worker for r in reads if r.outcome is Outcome.UNREACHABLE}
            )
        return done

    def _block_into(
        self, plan: Plan, inode: Inode, index: int, offset: int, out: memoryview
    ) -> bool:
        """One block range into `out` by the plan's routes in this thread: a same-host
        worker's file, else the one data port the plan names. What these cannot read is
        the full path's, whose failover and repair (a worker drops a block that fails its
        checksum and fetches it again) know more than this thread does."""
        for worker in plan.local:
            if self._short_circuit.read_into(worker, inode, index, offset, out) is Outcome.READ:
                return True
        if not self._ports:
            return False
        port = plan.port
        if port is None and self._same_host_ports:
            penalties = self._planner.penalties
            port = next(
                (w for w in plan.local if self._data_port.reaches(w) and not penalties.holds(w.id)),
                None,
            )
        if port is None:
            return False
        outcome = self._data_port.read_into(port, inode, index, offset, out)
        if outcome is Outcome.UNREACHABLE:
            self._unreachable({port.id: port})
        return outcome is Outcome.READ

    def _unreachable(self, workers: dict[str, WorkerRecord]) -> None:
        for worker in workers.values():
            error = Unavailable(f"data port {worker.data_address} of worker {worker.id}")
            self._view.worker_failed(worker, error)
