"""Short-circuit reads: blocks a worker on this host holds, read straight from its block
files (pread into this process's memory, checked against the header's checksum) with no
call to the worker. Plain blocking calls, safe from any thread: the event loop's read path
and the blocking client's caller-thread path (`ThreadReads`) share them."""

from __future__ import annotations

import os
import threading

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.blocks.block_file import read_block_file, read_block_file_into
from reservoir.common.blocks.fresh_bytes import filled_bytes
from reservoir.common.errors import DataLoss
from reservoir.common.models import Inode, WorkerRecord, shm_block_name

from .block_source import Outcome

log = logs.get_logger(__name__)


def range_length(inode: Inode, index: int, offset: int, length: int) -> int:
    """How many bytes a read of [offset, offset+length) within block `index` returns."""
    block_length = inode.block_length(index)
    start = min(offset, block_length)
    return block_length - start if length < 0 else min(length, block_length - start)


class ShortCircuit:
    def __init__(self, config: cfg.ClientConfig) -> None:
        self._on = config.short_circuit
        self._host = config.host
        self._verify = config.verify_checksums
        self._lock = threading.Lock()
        self.bytes_read = 0  # bytes read from same-host workers' files

    def reaches(self, worker: WorkerRecord) -> bool:
        return bool(self._on and worker.shm_dir and worker.host == self._host)

    def read(
        self, worker: WorkerRecord, inode: Inode, index: int, offset: int, length: int
    ) -> bytes | None:
        """The block range from `worker`'s file, or None when that is not possible
        (another host, not cached there, evicted, or bytes that fail their checksum)."""
        outcome = Outcome.DECLINED

        def fill(out: memoryview) -> None:
            nonlocal outcome
            outcome = self.read_into(worker, inode, index, offset, out)

        data = filled_bytes(range_length(inode, index, offset, length), fill)
        return data if outcome is Outcome.READ else None

    def read_into(
        self, worker: WorkerRecord, inode: Inode, index: int, offset: int, out: memoryview
    ) -> Outcome:
        """Bytes [offset, offset+len(out)) of block `index` into `out` (READ: `out` holds
        exactly them; otherwise `out` is undefined)."""
        if not self.reaches(worker):
            return Outcome.DECLINED
        block_length = inode.block_length(index)
        whole = offset == 0 and len(out) == block_length
        path = os.path.join(worker.shm_dir, shm_block_name(inode.file_id, index))
        try:
            # Copied out and checked against the checksum in the file's header: the file
            # is another process's, so it is never mapped or trusted.
            if whole:
                read_block_file_into(path, out, index * inode.block_size, verify=self._verify)
            else:
                data, _ = read_block_file(
                    path, block_length, index * inode.block_size, verify=self._verify
                )
                out[:] = memoryview(data)[offset : offset + len(out)]
        except OSError:
            return Outcome.DECLINED  # not cached there (or evicted since)
        except DataLoss as exc:
            # The worker will find the same when asked, drop the block and fetch it again.
            log.warning("short_circuit_block_corrupt", worker=worker.id, error=str(exc))
            return Outcome.DECLINED
        with self._lock:
            self.bytes_read += len(out)
        return Outcome.READ
