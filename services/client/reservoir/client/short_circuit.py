"""Short-circuit reads: blocks a worker on this host holds, read straight from its block
files (pread into this process's memory, checked against the header's checksum) with no
call to the worker. Plain blocking calls, safe from any thread: the event loop's read path
and the blocking client's caller-thread path (`ThreadReads`) share them."""

from __future__ import annotations

import os
import threading
from contextlib import AbstractContextManager, nullcontext

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.blocks.block_file import read_block_file, read_block_file_into
from reservoir.common.blocks.fresh_bytes import filled_bytes
from reservoir.common.errors import DataLoss
from reservoir.common.models import Inode, WorkerRecord, shm_block_name

from .block_source import Outcome

log = logs.get_logger(__name__)

# Reads up to this long take turns (`ShortCircuit.turn`). Such a read is a few microseconds
# of system calls (open, preadv, close), each of which lets the GIL go; with several
# threads reading at once each call hands it to another thread, a context switch per
# call, and the process reads half as many files a second as one thread does (4 threads
# on 2 cores: bench/README.md). Longer reads are copies that run beside other threads.
TURN_BYTES = 256 * 1024


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
        self._turn = threading.RLock()
        self.bytes_read = 0  # bytes read from same-host workers' files

    def turn(self) -> AbstractContextManager[object]:
        """Held for a batch of short reads: this thread's reads in it run one after the
        other while other threads' short reads wait (they would trade the GIL per call)."""
        return self._turn

    def reaches(self, worker: WorkerRecord) -> bool:
        return bool(self._on and worker.shm_dir and worker.host == self._host)

    def read(
        self, worker: WorkerRecord, inode: Inode, index: int, offset: int, length: int
    ) -> bytes | None:
        """The block range from `worker`'s file, or None when that is not possible
        (another host, not cached there, evicted, or bytes that fail their checksum)."""
        return filled_bytes(
            range_length(inode, index, offset, length),
            lambda out: self.read_into(worker, inode, index, offset, out) is Outcome.READ,
        )

    def read_into(
        self, worker: WorkerRecord, inode: Inode, index: int, offset: int, out: memoryview
    ) -> Outcome:
        """Bytes [offset, offset+len(out)) of block `index` into `out` (READ: `out` holds
        exactly them; otherwise `out` is undefined)."""
        if not self.reaches(worker):
            return Outcome.DECLINED
        path = os.path.join(worker.shm_dir, shm_block_name(inode.file_id, index))
        block_length = inode.block_length(index)
        # Every read copies the whole block out: its checksum covers all of it.
        turn = self._turn if block_length <= TURN_BYTES else nullcontext()
        try:
            with turn:
                self._copy(path, inode, index, block_length, offset, out)
        except OSError:
            return Outcome.DECLINED  # not cached there (or evicted since)
        except DataLoss as exc:
            # The worker will find the same when asked, drop the block and fetch it again.
            log.warning("short_circuit_block_corrupt", worker=worker.id, error=str(exc))
            return Outcome.DECLINED
        with self._lock:
            self.bytes_read += len(out)
        return Outcome.READ

    def _copy(
        self, path: str, inode: Inode, index: int, block_length: int, offset: int, out: memoryview
    ) -> None:
        # Copied out and checked against the checksum in the file's header: the file is
        # another process's, so it is never mapped or trusted.
        start = index * inode.block_size
        if offset == 0 and len(out) == block_length:
            read_block_file_into(path, out, start, verify=self._verify)
        else:
            data, _ = read_block_file(path, block_length, start, verify=self._verify)
            out[:] = memoryview(data)[offset : offset + len(out)]
