"""glibc allocator tuning, chosen per process from measurements.

Clients (`tune_for_large_buffers`): by default glibc serves every allocation above 128 KiB
with a fresh mmap and returns it with munmap, so each 1 MiB gRPC message costs 256 page
faults on arrival. Raising the mmap and trim thresholds lets those buffers (and the
block-sized results assembled from them) be reused from the heap: measured here, a warm
128 MiB read went from 3.0 to 1.2 ms of client CPU per MiB. The cost is up to
TRIM_THRESHOLD of freed memory kept for reuse.

Workers (`tune_for_bounded_footprint`): a worker's memory must follow its capacity. With a
fixed 256 KiB mmap threshold every block of that size or more (and every large transient
buffer: under-store bodies, outgoing messages) is a mapping of its own, returned to the
system when freed; a 16 MiB trim threshold bounds what the heap keeps. Measured here with
one worker of 64 MiB capacity, 1 MiB and 4 MiB blocks, 300 MiB read in shuffled epochs
(`bench/worker_memory.py`): glibc's defaults peaked at 178 MiB RSS and the client's tuning
at 185-199 MiB, still creeping up (the dynamic mmap threshold moves large buffers onto a
heap that is never trimmed); the fixed thresholds held 141-145 MiB, flat from the first
epoch, at the same epoch times. A worker that keeps its blocks in shared-memory files
holds only blocks in flight on its heap (fetched, then written out and sent): it gets
higher thresholds, so those buffers are reused rather than faulted in afresh (a cold read
of 8 x 32 MiB: 0.71 -> 0.36 s of worker CPU).
"""

from __future__ import annotations

import ctypes
import ctypes.util

from reservoir.common import logs

log = logs.get_logger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1024 * 1024 * 1024
TRIM_THRESHOLD = 1024 * 1024 * 1024
_applied: tuple[int, int] | None = None


def tune(mmap_threshold: int, trim_threshold: int) -> bool:
    """Sets both thresholds (a fixed mmap threshold also turns off glibc's dynamic one);
    False where the allocator is not glibc."""
    global _applied
    if _applied == (mmap_threshold, trim_threshold):
        return True
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )
    if ok:
        _applied = (mmap_threshold, trim_threshold)
    else:
        log.info("malloc_tuning_refused")
    return ok


def tune_for_large_buffers() -> bool:
    """The client's tuning: large buffers reused from the heap."""
    return tune(MMAP_THRESHOLD, TRIM_THRESHOLD)


def tune_for_bounded_footprint(mmap_threshold: int, trim_threshold: int) -> bool:
    """The worker's tuning: large transient buffers go straight back to the system."""
    return tune(mmap_threshold, trim_threshold)
