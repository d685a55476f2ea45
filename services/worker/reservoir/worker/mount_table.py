"""The worker's mount table, kept current by watching the metadata store.

Workers open the under-store a mount names only on a cache miss. A remount (a new
endpoint, credentials or block size at the same path) must reach that next miss, so the
table follows the mounts prefix in etcd: every put or delete lands here within
milliseconds. While the watch is down (etcd restarting), a lookup asks the master, the
way it did before watching; a cache hit never looks here at all.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from reservoir.common import logs
from reservoir.common.errors import NotFound, ReservoirError
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.key_watch import PrefixFollower
from reservoir.common.metadata.metadata_store import MetadataStore
from reservoir.common.models import Mount

log = logs.get_logger(__name__)


class MountSource(Protocol):
    """Who answers "which mounts are there" when the store cannot be followed: the master."""

    async def mounts(self) -> list[Mount]: ...


class MountListener(Protocol):
    """Told of every mount the table gains, changes or loses (e.g. to open its store)."""

    def mount_changed(self, mount: Mount) -> None: ...

    def mount_removed(self, mount_path: str) -> None: ...


class MountTable:
    def __init__(
        self,
        store: MetadataStore,
        master: MountSource,
        backoff_s: float = 0.5,
        max_backoff_s: float = 10.0,
        recheck_interval_s: float = 1.0,
    ) -> None:
        self._master = master
        self._follower = PrefixFollower(
            store,
            keyspace.MOUNTS,
            self,
            name="mount",
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
        )
        self._recheck_interval_s = recheck_interval_s
        self._rechecked: dict[str, float] = {}
        self._mounts: dict[str, Mount] = {}
        self._listeners: list[MountListener] = []
        self.loaded = asyncio.Event()  # set once the table was read from the store

    def subscribe(self, listener: MountListener) -> None:
        self._listeners.append(listener)
        for mount in self._mounts.values():
            listener.mount_changed(mount)

    async def get(self, mount_path: str, ufs_uri: str) -> Mount:
        """The mount as it is now. Looked up again at the master when it is unknown, when
        `ufs_uri` is not under it, or when the table is not being followed."""
        mount = self._mounts.get(mount_path)
        if mount is None or not ufs_uri.startswith(mount.uri) or not self.following:
            try:
                self._replace(await self._master.mounts(), source="master")
            except ReservoirError as exc:
                if mount is None:
                    raise
                log.warning(
                    "mount_table_unverified", mount=mount_path, uri=mount.uri, error=str(exc)
                )
                return mount
            mount = self._mounts.get(mount_path)
            if mount is None:
                raise NotFound(f"{mount_path} is not mounted")
        return mount

    async def recheck(self, mount: Mount) -> Mount | None:
        """The mount as the master has it now, when that differs from `mount`; else None.
        For a fetch that failed at the under-store: was it remounted since (a change the
        watch has not brought yet)? At most once per interval per mount; never raises."""
        now = time.monotonic()
        if now - self._rechecked.get(mount.path, -1e9) < self._recheck_interval_s:
            return None
        self._rechecked[mount.path] = now
        try:
            self._replace(await self._master.mounts(), source="master")
        except ReservoirError as exc:
            log.warning("mount_recheck_failed", mount=mount.path, error=str(exc))
            return None
        current = self._mounts.get(mount.path)
        return current if current is not None and current != mount else None

    def _replace(self, mounts: list[Mount], source: str) -> None:
        """The whole table, as read from the store or the master."""
        fresh = {m.path: m for m in mounts}
        for path in [p for p in self._mounts if p not in fresh]:
            self._remove(path, source)
        for mount in fresh.values():
            self._set(mount, source)

    def _remove(self, path: str, source: str) -> None:
        if self._mounts.pop(path, None) is not None:
            log.info("mount_removed", mount=path, source=source)
            for listener in self._listeners:
                listener.mount_removed(path)

    def _set(self, mount: Mount, source: str) -> None:
        path = mount.path
        old = self._mounts.get(path)
        self._mounts[path] = mount
        if old != mount:
            log.info(
                "mount_changed",
                mount=path,
                uri=mount.uri,
                endpoint=mount.options.endpoint_url,
                block_size=mount.options.block_size,
                was_endpoint=old.options.endpoint_url if old else None,
                source=source,  # watch, store (reloaded after a watch broke) or master
            )
            for listener in self._listeners:
                listener.mount_changed(mount)

    # ---- PrefixMirror: the store's mounts prefix ------------------------------------------

    def replace_all(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self._replace([Mount.from_json(v) for _, v in pairs], source="store")
        self.loaded.set()

    def apply(self, key: bytes, value: bytes | None) -> None:
        """One change seen by the watch."""
        if value is None:
            self._remove(key[len(keyspace.MOUNTS) :].decode(), "watch")
        else:
            self._set(Mount.from_json(value), "watch")

    def known(self) -> list[Mount]:
        """The mounts as the table has them now."""
        return list(self._mounts.values())

    @property
    def following(self) -> bool:
        """The table is current: loaded and watched (else lookups ask the master)."""
        return self._follower.following

    async def follow(self) -> None:
        """Follows the table for the life of the worker."""
        await self._follower.follow()
