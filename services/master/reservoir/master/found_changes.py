"""What the master found changed in each mount's under-store since it was last asked.

A change reaches the namespace by whichever path sees it first: the leader's interval
sync, a reader's miss that lists a stale directory or HEADs a file, a metadata load, an S3
event. Each of them compares what it read with the stored inode and notes the difference
here, so a sync's record (and a preload of what changed) counts a change however it was
found, once. Per mount: counts, and the paths of new or changed files up to a bound.
Kept in the leader's memory: a leader change loses what was noted since the last record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reservoir.common.models import Inode


@dataclass
class Found:
    added: int = 0  # files not stored before
    changed: int = 0  # files stored with another ETag, size or modification time
    removed: int = 0  # entries removed (a vanished directory counts once, with its subtree)
    # New or changed files, the first `max_paths`; `more` when there were others.
    paths: list[str] = field(default_factory=list)
    more: bool = False


class FoundChanges:
    def __init__(self, max_paths: int) -> None:
        self._max_paths = max_paths
        self._mounts: dict[str, Found] = {}

    def saw(self, mount_path: str, stored: Inode | None, written: Inode) -> None:
        """`written` replaced `stored` (None: nothing was stored) in the namespace."""
        if written.is_dir:
            return
        found = self._mounts.setdefault(mount_path, Found())
        if stored is None or stored.is_dir:
            found.added += 1
        else:
            found.changed += 1
        if len(found.paths) < self._max_paths:
            found.paths.append(written.path)
        else:
            found.more = True

    def saw_removed(self, mount_path: str, entries: int = 1) -> None:
        if entries:
            self._mounts.setdefault(mount_path, Found()).removed += entries

    def peek(self, mount_path: str) -> Found:
        return self._mounts.get(mount_path, Found())

    def drain(self, mount_path: str) -> Found:
        """What was found since the last drain, and a fresh start."""
        return self._mounts.pop(mount_path, Found())

    def forget(self, mount_path: str) -> None:
        self._mounts.pop(mount_path, None)
