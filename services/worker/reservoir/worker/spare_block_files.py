"""Spare block files for the shared-memory tier: tmpfs files whose pages are already there,
for the next blocks to land in.

Why: a new block file's pages are allocated and zeroed as the fetch first writes each one
(4 KiB at a time on a plain tmpfs), and given back when the file goes; that was half the
fetching worker's CPU on a cold read (bench/README.md, "Spare block files and huge
pages"). A spare's pages are mapped populated, already zeroed and the worker's. Spares come
from files written at start (`RESERVOIR_WORKER_SHM_PREALLOCATE`) and from landings the
tier did not keep (a full cache's admission policy turns most cold blocks away).

Only files no other process ever saw are reused: a landing the tier did not keep lived
under a temporary name, and its bytes were read only through the worker's own mapping, so
the file is reused once that mapping can close (no view of it remains: `mmap.close`
refuses while one does). A published block file that is evicted is unlinked as before,
because a same-host reader may hold it open or mapped."""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path

from reservoir.common import logs

log = logs.get_logger(__name__)

_ZEROS = bytes(1 << 20)


class SpareBlockFiles:
    """At most `limit_bytes` of spare files in `<directory>/.spare`, by file length, and
    the landings waiting for their last view to go before they join them."""

    def __init__(self, directory: Path, limit_bytes: int) -> None:
        self.directory = directory / ".spare"
        self.directory.mkdir(exist_ok=True)
        self.limit_bytes = limit_bytes
        self._by_length: dict[int, list[str]] = {}
        self._bytes = 0
        # File length and a callable that closes the landing's mapping and returns its
        # file's path, or None while a view of the mapping remains.
        self._retiring: list[tuple[int, Callable[[], str | None]]] = []
        self._retiring_bytes = 0
        self._lock = threading.Lock()

    @property
    def spare_bytes(self) -> int:
        return self._bytes

    def preallocate(self, file_length: int, reserve_bytes: int) -> int:
        """Makes spares of `file_length` bytes, pages allocated, up to the limit and while
        the file system keeps `reserve_bytes` free (room the tier's blocks will need);
        returns how many were made. (At start, off the event loop.)"""
        made = 0
        while file_length > 0 and self._bytes + file_length <= self.limit_bytes:
            fs = os.statvfs(self.directory)
            if fs.f_bavail * fs.f_frsize - file_length < reserve_bytes:
                log.info("shm_preallocate_stopped", made=made, reason="room kept for blocks")
                break
            path = str(self.directory / f".{secrets.token_hex(8)}.spare")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                # Sized first, so a huge-page tmpfs (huge=within_size) gives it huge
                # pages; then written, not fallocated: tmpfs zeroes a fallocated page only
                # when it is first touched, which would be in the landing.
                os.ftruncate(fd, file_length)
                for start in range(0, file_length, len(_ZEROS)):
                    os.pwrite(fd, _ZEROS[: file_length - start], start)
            except OSError as exc:  # the tmpfs is full: fewer spares, nothing else
                os.close(fd)
                os.unlink(path)
                log.warning("shm_preallocate_stopped", made=made, error=str(exc))
                break
            os.close(fd)
            with self._lock:
                self._add(path, file_length)
            made += 1
        return made

    def take(self, file_length: int) -> tuple[str, int] | None:
        """The path and length of the smallest spare of at least `file_length` bytes and
        at most a quarter more, now the caller's to rename and cut to size; None when
        there is none. (A small file's block never takes a block-sized spare: cutting it
        would free what the next large block needs, and split a huge page.)"""
        most = file_length + file_length // 4
        with self._lock:
            self._collect()
            fits = [n for n, paths in self._by_length.items() if paths and file_length <= n <= most]
            if not fits:
                return None
            length = min(fits)
            self._bytes -= length
            return self._by_length[length].pop(), length

    def retire(self, file_length: int, release: Callable[[], str | None]) -> bool:
        """Takes a landing the tier did not keep, to reuse its file once `release` gives
        it (its mapping closed); False when there is no room (the caller removes it)."""
        with self._lock:
            if self._bytes + self._retiring_bytes + file_length > self.limit_bytes:
                return False
            self._retiring.append((file_length, release))
            self._retiring_bytes += file_length
            self._collect()
            return True

    def _collect(self) -> None:
        waiting = []
        for length, release in self._retiring:
            path = release()
            if path is None:
                waiting.append((length, release))
                continue
            self._retiring_bytes -= length
            spare = str(self.directory / f".{secrets.token_hex(8)}.spare")
            try:
                os.rename(path, spare)
            except FileNotFoundError:
                continue
            self._add(spare, length)
        self._retiring = waiting

    def _add(self, path: str, length: int) -> None:
        self._by_length.setdefault(length, []).append(path)
        self._bytes += length
