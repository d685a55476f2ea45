"""Reads the blocking client answers in the caller's own thread, with no hop through the
event loop: the inode and the worker list come from what `ClusterView` already knows (while
fresh), the bytes from block files of workers on this host (`ShortCircuit`) or from
workers' data ports (`DataPortReader`), straight into the buffer the read returns. Anything
else — a cold inode, a worker that cannot answer, a failure — answers None (or False), and
the caller takes the full path (master, gRPC, failover, under-store) on the event loop.

Many threads call this at once (a DataLoader's workers, a thread pool of readers); what they
share is read-only here (dict reads under the GIL) except the counters, which lock."""

from __future__ import annotations

import time
from collections.abc import Sequence

from reservoir.common.fresh_bytes import filled_bytes
from reservoir.common.models import Inode, WorkerRecord

from .block_reader import BlockReader
from .cluster_view import ClusterView
from .data_port import BlockRead, DataPortReader, Outcome
from .short_circuit import ShortCircuit

# A range of one block to read into a buffer: (inode, block index, offset in the block, out).
_Part = tuple[Inode, int, int, memoryview]
_ORDERS_REMEMBERED = 100_000  # blocks whose worker order is kept (then forgotten at once)


class ThreadReads:
    def __init__(
        self,
        view: ClusterView,
        reader: BlockReader,
        short_circuit: ShortCircuit,
        data_port: DataPortReader,
    ) -> None:
        self._view = view
        self._reader = reader
        self._short_circuit = short_circuit
        self._data_port = data_port
        self._checked: tuple[list[WorkerRecord], bool] | None = None
        self._orders: dict[tuple[str, int], list[WorkerRecord]] = {}
        # Workers whose data port just failed, skipped here until then (the full path has
        # its own failover and health marks).
        self._failing: dict[str, float] = {}

    def _reaches(self, worker: WorkerRecord) -> bool:
        return self._short_circuit.reaches(worker) or self._data_port.reaches(worker)

    def knows_workers(self) -> bool:
        return self._view.known_workers() is not None

    def can_read(self) -> bool:
        """Whether reads here are possible at all (a worker this thread reaches)."""
        return self._workers() is not None

    def knows(self, path: str) -> bool:
        return self._view.known_inode(path) is not None

    def _workers(self) -> list[WorkerRecord] | None:
        """The worker list when this thread can read from one of them (checked once
        per list, not per read: the view replaces the list object when it renews it)."""
        workers = self._view.known_workers()
        if not workers:
            return None
        checked = self._checked
        if checked is None or checked[0] is not workers:
            checked = (workers, any(self._reaches(w) for w in workers))
            self._checked = checked
            self._orders = {}
        return workers if checked[1] else None

    def _order(self, inode: Inode, index: int, workers: list[WorkerRecord]) -> list[WorkerRecord]:
        """The workers to ask for a block, best first: worked out once per block and worker
        list (ordering and filtering the candidates costs more than the read of a small
        block file)."""
        key = (inode.file_id, index)
        order = self._orders.get(key)
        if order is None:
            if len(self._orders) >= _ORDERS_REMEMBERED:
                self._orders = {}
            ranked = self._reader.ordered(inode, index, workers)
            order = [w for w in ranked if self._reaches(w)]
            self._orders[key] = order
        return order

    def read(self, path: str, offset: int, length: int) -> bytes | None:
        """Bytes [offset, offset+length) of `path`, or None."""
        inode = self._view.known_inode(path)
        if inode is None or inode.is_dir:
            return None
        return self.read_inode_bytes(inode, offset, length)

    def read_inode_bytes(self, inode: Inode, offset: int, length: int) -> bytes | None:
        """The range as one `bytes`, each block read straight into it: one copy of each
        byte (file or socket to the result), where pieces joined afterwards cost two."""
        end = inode.size if length < 0 else min(inode.size, offset + length)
        if offset >= end:
            return b"" if self._workers() is not None else None
        complete = False

        def fill(out: memoryview) -> None:
            nonlocal complete
            complete = self.read_into(inode, offset, out)

        data = filled_bytes(end - offset, fill)
        return data if complete else None

    def read_inode(self, inode: Inode, offset: int, length: int) -> list[bytes | memoryview] | None:
        data = self.read_inode_bytes(inode, offset, length)
        return None if data is None else [data]

    def read_into(self, inode: Inode, offset: int, out: memoryview) -> bool:
        """Bytes [offset, offset+len(out)) of the file straight into `out` (which must not
        reach past the end of the file): True when every block of it could be read here,
        False otherwise (`out` is then undefined)."""
        workers = self._workers()
        if workers is None:
            return False
        if offset + len(out) > inode.size:
            raise ValueError("read past the end of the file")
        if not out:
            return True
        block_size = inode.block_size
        end = offset + len(out)
        parts: list[_Part] = []
        filled = 0
        for index in range(offset // block_size, (end - 1) // block_size + 1):
            block_start = index * block_size
            lo = max(offset, block_start) - block_start
            hi = min(end, block_start + inode.block_length(index)) - block_start
            parts.append((inode, index, lo, out[filled : filled + hi - lo]))
            filled += hi - lo
        left, failed = self._many_over_data_ports(parts, workers) if len(parts) > 1 else ([0], [])
        return not failed and all(self._block_into(*parts[i], workers) for i in left)

    def read_many(self, inodes: Sequence[Inode]) -> list[bytes | None]:
        """Whole contents of many files of one block each (the small files of a batch),
        read here: requests pipelined to each worker's data port, same-host files read
        directly. None for a file not read (a larger one, a directory, a failure): the
        caller reads those the full way."""
        results: list[bytes | None] = [None] * len(inodes)
        workers = self._workers()
        if workers is None:
            return results
        positions: list[int] = []
        buffers: list[bytearray] = []
        parts: list[_Part] = []
        for position, inode in enumerate(inodes):
            if inode.is_dir or inode.size > inode.block_size:
                continue
            if inode.size == 0:
                results[position] = b""
                continue
            buffer = bytearray(inode.size)
            positions.append(position)
            buffers.append(buffer)
            parts.append((inode, 0, 0, memoryview(buffer)))
        left, failed_here = self._many_over_data_ports(parts, workers)
        failed = {i for i in left if not self._block_into(*parts[i], workers)}
        failed.update(failed_here)
        for i, position in enumerate(positions):
            if i not in failed:
                results[position] = bytes(buffers[i])
        return results

    def _many_over_data_ports(
        self, parts: list[_Part], workers: list[WorkerRecord]
    ) -> tuple[list[int], list[int]]:
        """Reads the parts whose best worker is reached by its data port, pipelined.
        Returns where in `parts` the rest are (for one-by-one reads: same-host blocks,
        blocks whose best worker is failing) and where the failed ones are (for the full
        path)."""
        reads: list[BlockRead] = []
        at: list[int] = []
        rest: list[int] = []
        failed: list[int] = []
        for i, part in enumerate(parts):
            inode, index = part[0], part[1]
            order = self._order(inode, index, workers)
            first = order[0] if order else None
            if (
                first is not None
                and not self._short_circuit.reaches(first)
                and self._data_port.reaches(first)
                and not self._is_failing(first)
            ):
                reads.append(BlockRead(first, *part))
                at.append(i)
            else:
                rest.append(i)
        if reads:
            self._data_port.read_all_into(reads)
        for i, read in zip(at, reads, strict=True):
            if not read.done:
                if read.outcome is Outcome.UNREACHABLE:
                    self._leave_be(read.worker)
                failed.append(i)
        return sorted(rest), failed

    def _block_into(
        self, inode: Inode, index: int, offset: int, out: memoryview, workers: list[WorkerRecord]
    ) -> bool:
        """One block range into `out`: from a same-host worker's file, else from one data
        port (the best worker not failing). A data port that cannot answer leaves the block
        to the full path, whose failover and repair (a worker drops a block that fails its
        checksum and fetches it again) know more than this thread does."""
        whole = offset == 0 and len(out) == inode.block_length(index)
        for worker in self._order(inode, index, workers):
            if self._short_circuit.reaches(worker):
                if whole:
                    if self._short_circuit.read_into(worker, inode, index, out):
                        return True
                    continue
                piece = self._short_circuit.read(worker, inode, index, offset, len(out))
                if piece is not None:
                    out[:] = piece
                    return True
            elif self._data_port.reaches(worker):
                # Only the best worker's port: the next one may not hold the block, and
                # choosing another replica is the full path's to do.
                if self._is_failing(worker):
                    return False
                outcome = self._data_port.read_into(worker, inode, index, offset, out)
                if outcome is Outcome.UNREACHABLE:
                    self._leave_be(worker)
                return outcome is Outcome.READ
        return False

    def _leave_be(self, worker: WorkerRecord) -> None:
        self._failing[worker.id] = time.monotonic() + self._view.config.workers_ttl_s

    def _is_failing(self, worker: WorkerRecord) -> bool:
        until = self._failing.get(worker.id)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        self._failing.pop(worker.id, None)
        return False
