"""Reads the blocking client answers in the caller's own thread, with no hop through the
event loop: the inode and the worker list come from what `ClusterView` already knows (while
fresh), the bytes from block files of workers on this host (`ShortCircuit`). Anything else —
a cold inode, a block held only elsewhere, a failure — answers None, and the caller takes
the full path (master, gRPC, failover, under-store) on the event loop.

Many threads call this at once (a DataLoader's workers, a thread pool of readers); what they
share is read-only here (dict reads under the GIL) except the byte counter, which locks."""

from __future__ import annotations

from reservoir.common.fresh_bytes import filled_bytes
from reservoir.common.models import Inode, WorkerRecord

from .block_reader import BlockReader
from .cluster_view import ClusterView
from .short_circuit import ShortCircuit

_ORDERS_REMEMBERED = 100_000  # blocks whose same-host order is kept (then forgotten at once)


class LocalReads:
    def __init__(self, view: ClusterView, reader: BlockReader, short_circuit: ShortCircuit) -> None:
        self._view = view
        self._reader = reader
        self._short_circuit = short_circuit
        self._checked: tuple[list[WorkerRecord], bool] | None = None
        self._orders: dict[tuple[str, int], list[WorkerRecord]] = {}

    def _workers(self) -> list[WorkerRecord] | None:
        """The fresh worker list when one of them is on this host (once per list, not per
        read: the view replaces the list object when it renews it)."""
        workers = self._view.known_workers()
        if not workers:
            return None
        checked = self._checked
        if checked is None or checked[0] is not workers:
            checked = (workers, any(self._short_circuit.reaches(w) for w in workers))
            self._checked = checked
            self._orders = {}
        return workers if checked[1] else None

    def _local_order(
        self, inode: Inode, index: int, workers: list[WorkerRecord]
    ) -> list[WorkerRecord]:
        """The same-host workers to look in for a block, best first: worked out once per
        block and worker list (rendezvous hashing over every worker costs more than the
        read of a small block file). A failing worker is not routed around here: its files
        are read and checked like any other's."""
        key = (inode.file_id, index)
        order = self._orders.get(key)
        if order is None:
            if len(self._orders) >= _ORDERS_REMEMBERED:
                self._orders = {}
            ranked = self._reader.ordered(inode, index, workers)
            order = [w for w in ranked if self._short_circuit.reaches(w)]
            self._orders[key] = order
        return order

    def read(self, path: str, offset: int, length: int) -> bytes | None:
        """Bytes [offset, offset+length) of `path`, or None."""
        inode = self._view.known_inode(path)
        if inode is None or inode.is_dir:
            return None
        return self.read_inode_bytes(inode, offset, length)

    def read_inode_bytes(self, inode: Inode, offset: int, length: int) -> bytes | None:
        """The range as one `bytes`, whole blocks read from their files straight into it:
        one copy of each byte, where pieces joined afterwards would cost two."""
        workers = self._workers()
        if workers is None:
            return None
        end = inode.size if length < 0 else min(inode.size, offset + length)
        if offset >= end:
            return b""
        block_size = inode.block_size
        first, last = offset // block_size, (end - 1) // block_size
        if first == last:
            block_start = first * block_size
            piece = self._block(inode, first, offset - block_start, end - offset, workers)
            return piece if piece is None or type(piece) is bytes else bytes(piece)
        complete = True

        def fill(out: memoryview) -> None:
            nonlocal complete
            filled = 0
            for index in range(first, last + 1):
                block_start = index * block_size
                block_length = inode.block_length(index)
                lo = max(offset, block_start) - block_start
                hi = min(end, block_start + block_length) - block_start
                target = out[filled : filled + hi - lo]
                if (lo, hi) == (0, block_length):
                    done = any(
                        self._short_circuit.read_into(worker, inode, index, target)
                        for worker in self._local_order(inode, index, workers)
                    )
                else:
                    piece = self._block(inode, index, lo, hi - lo, workers)
                    if piece is not None:
                        target[:] = piece
                    done = piece is not None
                if not done:
                    complete = False
                    return
                filled += hi - lo

        data = filled_bytes(end - offset, fill)
        return data if complete else None

    def read_inode(self, inode: Inode, offset: int, length: int) -> list[bytes | memoryview] | None:
        workers = self._workers()
        if workers is None:
            return None
        end = inode.size if length < 0 else min(inode.size, offset + length)
        if offset >= end:
            return []
        block_size = inode.block_size
        pieces: list[bytes | memoryview] = []
        for index in range(offset // block_size, (end - 1) // block_size + 1):
            block_start = index * block_size
            lo = max(offset, block_start) - block_start
            hi = min(end, block_start + inode.block_length(index)) - block_start
            piece = self._block(inode, index, lo, hi - lo, workers)
            if piece is None:
                return None
            pieces.append(piece)
        return pieces

    def _block(
        self, inode: Inode, index: int, offset: int, length: int, workers: list[WorkerRecord]
    ) -> bytes | memoryview | None:
        for worker in self._local_order(inode, index, workers):
            piece = self._short_circuit.read(worker, inode, index, offset, length)
            if piece is not None:
                return piece
        return None

    def read_blocks_into(self, inode: Inode, first: int, out: memoryview) -> bool:
        """Whole blocks from `first` on, as many as fill `out` exactly (it must end on a
        block boundary or at the end of the file), read straight into `out`: True when
        every one came from this host, False otherwise (`out` is then undefined)."""
        workers = self._workers()
        if workers is None:
            return False
        filled, index = 0, first
        while filled < len(out):
            length = inode.block_length(index)
            target = out[filled : filled + length]
            if len(target) != length:
                raise ValueError("out must end on a block boundary")
            if not any(
                self._short_circuit.read_into(worker, inode, index, target)
                for worker in self._local_order(inode, index, workers)
            ):
                return False
            filled += length
            index += 1
        return True
