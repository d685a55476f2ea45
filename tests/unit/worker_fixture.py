"""A WorkerService in this process, on a memory:// metadata store and a file:// under-store
directory (no sockets, no servers): what the worker's read and data port tests drive."""

from __future__ import annotations

from pathlib import Path

from reservoir.common.config import WorkerConfig
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import Mount, file_id_for
from reservoir.worker.cache_rules import CacheRuleTable
from reservoir.worker.mount_table import MountTable
from reservoir.worker.read_request import BlockRequest
from reservoir.worker.service import WorkerService

MOUNT = "/d"
BLOCK = 4096


class _Master:
    """The one mount the worker may ask the master about."""

    def __init__(self, mount: Mount) -> None:
        self._mount = mount

    async def mounts(self) -> list[Mount]:
        return [self._mount]


def worker(root: Path, *, shm_dir: Path | None = None) -> WorkerService:
    """A worker whose mount MOUNT is the directory `root` (file:// under-store)."""
    store = MemoryMetadataStore()
    mounts = MountTable(store, _Master(Mount(MOUNT, f"file://{root}/")))
    config = WorkerConfig(
        worker_id="w1", capacity_bytes=1 << 24, shm_dir=str(shm_dir) if shm_dir else ""
    )
    return WorkerService(config, mounts, CacheRuleTable(store))


def request(
    root: Path,
    name: str,
    size: int,
    *,
    index: int = 0,
    offset: int = 0,
    length: int = -1,
    ufs_uri: str = "",
) -> BlockRequest:
    """A read of block `index` of `root/name` (`size` bytes), as a client would send it."""
    uri = ufs_uri or f"file://{root}/{name}"
    st = (root / name).stat() if (root / name).exists() else None
    etag = f"{st.st_mtime_ns:x}-{st.st_size:x}" if st else "e"
    return BlockRequest(
        file_id=file_id_for(uri, etag, size, BLOCK),
        index=index,
        offset=offset,
        length=length,
        ufs_uri=uri,
        etag=etag,
        file_size=size,
        block_size=BLOCK,
        mount_path=MOUNT,
    )
