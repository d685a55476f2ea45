"""The last route to a block: its range read from the under-store by the client itself,
when no worker could serve it (and `ufs_fallback` allows it). The object's ETag goes with
the request, so a changed object is refused (Conflict), never mixed with cached blocks."""

from __future__ import annotations

import asyncio

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.errors import NotFound, ReservoirError, Unavailable
from reservoir.common.models import Inode
from reservoir.common.understore.mounted_stores import MountedStores

from .cluster_view import ClusterView
from .integrity import check_block
from .read_admission import ReadAdmission
from .short_circuit import range_length

log = logs.get_logger(__name__)


class UnderStoreBlocks:
    def __init__(
        self,
        config: cfg.ClientConfig,
        view: ClusterView,
        under_stores: MountedStores,
        admission: ReadAdmission,
    ) -> None:
        """`admission`: asked before each GET (the mount's under-store budget)."""
        self._config = config
        self._view = view
        self._under_stores = under_stores
        self._admission = admission

    async def fetch(
        self, inode: Inode, index: int, offset: int, length: int, cause: ReservoirError | None
    ) -> bytes:
        """The range's bytes; Unavailable naming `cause` (why no worker served it) when
        the client may not read the under-store itself."""
        if not self._config.ufs_fallback:
            raise Unavailable(f"{inode.path}: no worker could serve block {index} ({cause})")
        try:
            mounts = await self._view.mounts()
        except Unavailable:
            known = self._view.known_mounts()
            if known is None:
                raise
            mounts = known  # the master is down too: the last list known
        mount = next((m for m in mounts if m.path == inode.mount_path), None)
        if mount is None:
            raise NotFound(f"{inode.mount_path} is no longer mounted")
        ufs = await self._under_stores.open(mount)
        log.info("read_from_under_store", path=inode.path, block=index)
        start = index * inode.block_size + min(offset, inode.block_length(index))
        want = range_length(inode, index, offset, length)
        async with self._admission.admitted(mount, want):
            data = await asyncio.to_thread(
                ufs.get_range, ufs.key_of(inode.ufs_uri), start, want, inode.etag
            )
        check_block(f"{inode.path}: block {index} from the under-store", data, want, None, False)
        return data
