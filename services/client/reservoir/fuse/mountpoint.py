"""A mount point as the kernel sees it: not mounted, served, or dead; and unmounting it.

A FUSE mount whose serving process died stays in the mount table, and every call on it
fails with ENOTCONN ("Transport endpoint is not connected") until it is unmounted. A lazy
unmount (`fusermount3 -uz`) takes it out of the namespace at once, even while programs
still hold files open on it (they get errors; new opens see the directory again).
"""

from __future__ import annotations

import enum
import errno
import os
import re
import shutil
import subprocess
from pathlib import Path

FUSERMOUNT = "fusermount3"
SUBTYPE = "reservoir"
FSTYPE = f"fuse.{SUBTYPE}"  # how the mount table names Reservoir's mounts
_MOUNTINFO = Path("/proc/self/mountinfo")
_OCTAL = re.compile(r"\\([0-7]{3})")


class MountState(enum.Enum):
    ABSENT = "absent"  # nothing mounted there
    LIVE = "live"  # mounted and answering
    DEAD = "dead"  # a FUSE mount whose serving process is gone (ENOTCONN)


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


class MountPoint:
    """One directory a FUSE file system is mounted on."""

    def __init__(self, path: str | Path, timeout_s: float) -> None:
        # Resolved once, while nothing is mounted on it: a dead mount cannot be resolved.
        self.path = os.path.realpath(path)
        self._timeout_s = timeout_s

    def fstype(self) -> str | None:
        """The type of the file system mounted last on this directory (None: none)."""
        found = None
        for line in _MOUNTINFO.read_text().splitlines():
            fields = line.split()
            if len(fields) < 7 or _unescape(fields[4]) != self.path:
                continue
            found = fields[fields.index("-", 6) + 1]
        return found

    def is_mounted(self) -> bool:
        return self.fstype() is not None

    def state(self) -> MountState:
        if not self.is_mounted():
            return MountState.ABSENT
        try:
            os.stat(self.path)
        except OSError as exc:
            if exc.errno in (errno.ENOTCONN, errno.ECONNABORTED):
                return MountState.DEAD
            raise
        return MountState.LIVE

    def unmount(self, *, lazy: bool) -> None:
        """`fusermount3 -u` (`-uz` when `lazy`); an error says why it was refused (busy)."""
        binary = shutil.which(FUSERMOUNT)
        if binary is None:
            raise FileNotFoundError(
                f"{FUSERMOUNT} not found: install fuse3 (apt-get install fuse3)"
            )
        flags = "-uz" if lazy else "-u"
        try:
            done = subprocess.run(
                [binary, flags, self.path],
                capture_output=True,
                text=True,
                timeout=self._timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError(
                f"{FUSERMOUNT} {flags} {self.path}: no answer in {exc.timeout}s"
            ) from exc
        if done.returncode != 0:
            message = done.stderr.strip() or f"exit status {done.returncode}"
            number = errno.EBUSY if "busy" in message.lower() else errno.EIO
            raise OSError(number, f"cannot unmount {self.path}: {message}")
