"""Mounts made, replaced and removed: the under-store checked before anything is stored,
and what came from an old store (inodes, listing marks, interval-sync records) dropped
with it."""

from __future__ import annotations

from reservoir.common import logs, paths
from reservoir.common.models import Mount, MountOptions
from reservoir.common.understore.mounted_stores import MountedStores

from .interval_sync import IntervalSync
from .metadata_sync import NamespaceSync, now_ms
from .mount_table import MountTable
from .namespace_store import NamespaceStore

log = logs.get_logger(__name__)


class MountChanges:
    def __init__(
        self,
        table: MountTable,
        stores: MountedStores,
        sync: NamespaceSync,
        namespace: NamespaceStore,
        interval_sync: IntervalSync,
    ) -> None:
        self._table = table
        self._stores = stores
        self._sync = sync  # its pool runs the under-store's blocking calls
        self._namespace = namespace
        self._interval_sync = interval_sync

    async def mount(
        self, path: str, uri: str, options: MountOptions, *, replace: bool = False
    ) -> Mount:
        """Mounts `uri` at `path`. The very same mount again (same URI and options) is a
        no-op that returns the mount as it is, unless `replace`. `replace` swaps out a mount
        already there: the new store is checked first (a failing one leaves the old mount
        alone), then the namespace below `path` is dropped, to be read again from the new
        store. Workers follow the mounts in etcd, so their next request uses the new mount.
        A replacement that reads the same objects the same way (same URI, endpoint,
        credentials and block size) but changes other options changes only policies: the
        namespace and the cache stay (`apply` of a changed Dataset). The very same mount
        replaced is read afresh."""
        # Refused before anything is contacted: a refused under-store gets no request.
        path, options = self._table.admit(path, uri, options)
        # Fail fast at mount time: one attempt, so a wrong endpoint is reported in seconds.
        probe = await self._sync.ufs(self._stores.probe, uri, options)
        async with self._table.lock:
            same = None if replace else self._table.already(path, probe.uri, options)
            if same is not None:
                log.info("already mounted", path=path, uri=same.uri)
                return same
            old = self._table.check_place(path, replace)
            await self._sync.ufs(probe.check)
            if (
                old is not None
                and old.uri == probe.uri
                and old.options != options
                and old.options.same_store(options)
            ):
                mount = Mount(path, old.uri, options, created_ms=old.created_ms)
                await self._table.put(mount)
                log.info("mount_options_changed", path=path, uri=mount.uri)
                return mount
            mount = Mount(path=path, uri=probe.uri, options=options, created_ms=now_ms())
            await self._table.put(mount)
            self._stores.prepare(mount)
            if old is not None:
                # Inodes (ETags, sizes, block sizes) and listing marks came from the old store.
                await self._namespace.delete_mount(path)
                await self._interval_sync.forget(path)
        log.info(
            "remounted" if old else "mounted",
            path=path,
            uri=mount.uri,
            endpoint=options.endpoint_url,
            block_size=options.block_size,
            was_uri=old.uri if old else None,
            was_endpoint=old.options.endpoint_url if old else None,
        )
        return mount

    async def unmount(self, path: str) -> None:
        path = paths.normalize(path)
        async with self._table.lock:
            await self._table.remove(path)
            await self._namespace.delete_mount(path)
            self._stores.forget(path)
            await self._interval_sync.forget(path)
        log.info("unmounted", path=path)
