"""How many files and directories the namespace holds, for the master's metrics.

etcd can count keys but not the entries packed in each chunk, and reading every chunk at
every scrape would read the whole namespace. So the leader counts once, when it starts to
lead, and from then on adds what its own writes change (it is the only writer). The count
reads one directory group at a time under that group's write lock, in key order; a write
to a group the count has not reached yet is left to the count, which will read it, and
one to a group already counted is added here. So the totals are exact at every moment
once the count is done, and absent before (a standby has none)."""

from __future__ import annotations

from reservoir.common.metadata import keyspace


class NamespaceCounts:
    def __init__(self) -> None:
        self._by_mount: dict[bytes, list[int]] = {}  # mount prefix -> [files, directories]
        self._counted_below = b""  # groups sorting before this have been counted
        self._done = False

    def restart(self) -> None:
        """Forgets every count: what a master does before it counts again."""
        self._by_mount.clear()
        self._counted_below = b""
        self._done = False

    def counted(self, group: bytes) -> bool:
        return self._done or group < self._counted_below

    def add(self, group: bytes, files: int, directories: int) -> None:
        """A write's change to `group` (called under the group's lock)."""
        if not self.counted(group) or not (files or directories):
            return
        totals = self._by_mount.setdefault(keyspace.namespace_mount_of(group), [0, 0])
        totals[0] += files
        totals[1] += directories

    def group_counted(self, group: bytes, files: int, directories: int) -> None:
        """The count has read `group` (under its lock): everything in it is known."""
        self._counted_below = group + b"\xff"
        self.add(group, files, directories)

    def finish(self) -> None:
        self._done = True

    def drop_mount(self, mount_prefix: bytes) -> None:
        self._by_mount.pop(mount_prefix, None)

    def totals(self) -> tuple[int, int] | None:
        """(files, directories) in the whole namespace; None until counted."""
        if not self._done:
            return None
        return (
            sum(t[0] for t in self._by_mount.values()),
            sum(t[1] for t in self._by_mount.values()),
        )
