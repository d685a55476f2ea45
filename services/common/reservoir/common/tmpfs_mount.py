"""A tmpfs of a worker's own for its memory tier, backed by transparent huge pages.

Why: a block file in a plain tmpfs (/dev/shm is mounted `huge=never` on most hosts) is
faulted in 4 KiB at a time: filling one cost 0.7-0.9 ms of CPU per MiB here, against
0.09-0.15 with `huge=within_size` where the huge pages had been in use just before
(bench/README.md, "Spare block files and huge pages"), and a short-circuit reader maps a
block with two faults instead of a thousand.

Mounting needs CAP_SYS_ADMIN, and the clients that read block files directly must share the
worker's mount namespace (a host's processes, or pods mounting a hostPath with
Bidirectional propagation): otherwise they would look at the empty directory beneath.
Alluxio's `alluxio-start.sh worker SudoMount` mounts its ramdisk the same way."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import logs

log = logs.get_logger(__name__)

_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MNT_DETACH = 0x2
# Values of tmpfs's `huge=` under which a block file of 2 MiB or more gets huge pages with
# no madvise from each mapper.
HUGE_SETTINGS = ("always", "within_size")


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/self/mountinfo: where, which file system, its own options."""

    mount_point: str
    fstype: str
    options: dict[str, str]

    @property
    def huge_pages(self) -> bool:
        return self.fstype == "tmpfs" and self.options.get("huge") in HUGE_SETTINGS


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash in mount points as octal escapes.
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def parse_mountinfo(text: str) -> list[MountEntry]:
    entries = []
    for line in text.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        options = {}
        for option in tail[2].split(","):
            key, _, value = option.partition("=")
            options[key] = value
        entries.append(MountEntry(_unescape(fields[4]), tail[0], options))
    return entries


def mounts() -> list[MountEntry]:
    try:
        return parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    except OSError:  # not Linux: nothing is known, nothing is mounted by us
        return []


def mount_of(path: str | Path, entries: list[MountEntry] | None = None) -> MountEntry | None:
    """The mount `path` lives on: the deepest mount point at or above it (the last one
    mounted there, when several are stacked)."""
    target = os.path.realpath(path)
    best: MountEntry | None = None
    for entry in mounts() if entries is None else entries:
        point = entry.mount_point
        within = target == point or target.startswith(point.rstrip("/") + "/")
        if within and (best is None or len(point) >= len(best.mount_point)):
            best = entry
    return best


def mount_points_below(path: str | Path) -> list[str]:
    """Mount points at or below `path`, deepest first (the order to unmount them in)."""
    top = os.path.realpath(path).rstrip("/")
    found = {
        e.mount_point
        for e in mounts()
        if e.mount_point == top or e.mount_point.startswith(top + "/")
    }
    return sorted(found, key=len, reverse=True)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def mount_huge_tmpfs(directory: str | Path, size_bytes: int) -> None:
    """Mounts a tmpfs of at most `size_bytes` with huge pages at `directory` (created if
    missing). OSError (EPERM without CAP_SYS_ADMIN) when the kernel refuses."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    options = f"huge=within_size,size={size_bytes},mode=0755".encode()
    flags = _MS_NOSUID | _MS_NODEV
    if _libc().mount(b"tmpfs", os.fsencode(directory), b"tmpfs", flags, options) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount tmpfs at {directory}: {os.strerror(code)}")


def unmount(directory: str | Path) -> None:
    """Detaches the mount at `directory`: its memory is freed once no process holds a
    file of it open or mapped."""
    if _libc().umount2(os.fsencode(directory), _MNT_DETACH) != 0:
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOENT):  # not (or no longer) a mount point
            raise OSError(code, f"unmount {directory}: {os.strerror(code)}")


class HugeTmpfs:
    """The worker's memory-tier directory on a huge-page tmpfs for the worker's lifetime.

    `open` mounts one unless the directory already is on a huge-page tmpfs (an operator's,
    or one a killed worker left: it is used as found, and left mounted); `close` unmounts
    only what `open` mounted. Where mounting is refused, the tier stays on the file system
    beneath, as without the setting, and a warning says why."""

    def __init__(self, directory: str | Path, size_bytes: int) -> None:
        self.directory = Path(directory)
        self.size_bytes = size_bytes
        self._mounted = False

    def open(self) -> bool:
        """Whether block files in the directory now get huge pages."""
        self.directory.mkdir(parents=True, exist_ok=True)
        current = mount_of(self.directory)
        if current is not None and current.huge_pages:
            log.info("shm_huge_pages", directory=str(self.directory), mounted=False)
            return True
        try:
            mount_huge_tmpfs(self.directory, self.size_bytes)
        except OSError as exc:
            log.warning("shm_huge_pages_unavailable", directory=str(self.directory), error=str(exc))
            return False
        self._mounted = True
        log.info(
            "shm_huge_pages", directory=str(self.directory), mounted=True, size=self.size_bytes
        )
        return True

    def close(self) -> None:
        if self._mounted:
            self._mounted = False
            try:
                unmount(self.directory)
            except OSError as exc:
                log.warning("shm_unmount_failed", directory=str(self.directory), error=str(exc))


def remove_tree(path: str | Path) -> None:
    """Removes `path` and what is below it, first unmounting any tmpfs a worker mounted
    there and did not unmount (it was killed). Errors are ignored, as by the cleanup of a
    crashed cluster they must be."""
    for point in mount_points_below(path):
        try:
            unmount(point)
        except OSError as exc:
            log.warning("shm_unmount_failed", directory=point, error=str(exc))
    shutil.rmtree(path, ignore_errors=True)
