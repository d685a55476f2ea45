"""Short-circuit reads: blocks a worker on this host holds, read straight from its block
files (pread into this process's memory, checked against the header's checksum) with no
gRPC call. Plain blocking calls, safe from any thread: the event loop's read path and the
blocking client's caller-thread path (`ThreadReads`) share them."""

from __future__ import annotations

import os
import threading

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.block_file import read_block_file, read_block_file_into
from reservoir.common.errors import DataLoss
from reservoir.common.models import Inode, WorkerRecord, shm_block_name

log = logs.get_logger(__name__)


def range_length(inode: Inode, index: int, offset: int, length: int) -> int:
    """How many bytes a read of [offset, offset+length) within block `index` returns."""
    block_length = inode.block_length(index)
    start = min(offset, block_length)
    return block_length - start if length < 0 else min(length, block_length - start)


class ShortCircuit:
    def __init__(self, config: cfg.ClientConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._bytes = 0

    @property
    def bytes_read(self) -> int:
        """Bytes read from same-host workers' files."""
        return self._bytes

    def reaches(self, worker: WorkerRecord) -> bool:
        return bool(
            self._config.short_circuit and worker.shm_dir and worker.host == self._config.host
        )

    def _path(self, worker: WorkerRecord, inode: Inode, index: int) -> str:
        return os.path.join(worker.shm_dir, shm_block_name(inode.file_id, index))

    def _count(self, n: int) -> None:
        with self._lock:
            self._bytes += n

    def read(
        self, worker: WorkerRecord, inode: Inode, index: int, offset: int, length: int
    ) -> bytes | memoryview | None:
        """The block range from `worker`'s file, or None when that is not possible
        (another host, not cached there, evicted, or bytes that fail their checksum)."""
        if not self.reaches(worker):
            return None
        block_length = inode.block_length(index)
        try:
            # The whole block, copied out and checked against the checksum in its header:
            # the file is another process's, so it is never mapped or trusted.
            data, _ = read_block_file(
                self._path(worker, inode, index),
                block_length,
                index * inode.block_size,
                verify=self._config.verify_checksums,
            )
        except OSError:
            return None  # not cached there (or evicted since)
        except DataLoss as exc:
            # The worker will find the same when asked over gRPC, drop it and refetch.
            log.warning("short_circuit_block_corrupt", worker=worker.id, error=str(exc))
            return None
        start = min(offset, block_length)
        want = range_length(inode, index, offset, length)
        self._count(want)
        if (start, want) == (0, block_length):
            return data
        return memoryview(data)[start : start + want]

    def read_into(self, worker: WorkerRecord, inode: Inode, index: int, out: memoryview) -> bool:
        """The whole block `index` read into `out` (exactly its length): True when done,
        False when this worker's file cannot give it (`out` is then undefined)."""
        if not self.reaches(worker):
            return False
        try:
            read_block_file_into(
                self._path(worker, inode, index),
                out,
                index * inode.block_size,
                verify=self._config.verify_checksums,
            )
        except OSError:
            return False
        except DataLoss as exc:
            log.warning("short_circuit_block_corrupt", worker=worker.id, error=str(exc))
            return False
        self._count(len(out))
        return True
