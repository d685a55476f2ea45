"""What the cache-aware sampler asks of the cluster: which files are cached, and to load
others. `CacheView` is that question; `ClusterCacheView` answers it from a cluster."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Protocol

from reservoir.client import Client
from reservoir.common import logs
from reservoir.common.errors import PermissionDenied, ReservoirError
from reservoir.common.models import Inode

log = logs.get_logger(__name__)


class CacheView(Protocol):
    def cached(self, paths: Sequence[str]) -> list[bool]:
        """Per path: whether every block of the file is in the cache now."""
        ...

    def load(self, paths: Sequence[str]) -> None:
        """Asks for these files to be loaded into the cache, in this order, without
        waiting for them."""
        ...


def fully_cached(inode: Inode) -> bool:
    """Every block of the file has a worker holding it (an empty file has nothing to read)."""
    return all(inode.locations.get(i) for i in range(inode.block_count))


class ClusterCacheView:
    """A `CacheView` over a cluster: the master's block-location table, asked in batched
    stats (`stat_many(..., with_locations=True)`: one call per 1,000 files), and load
    jobs that name the files (`submit_load(..., files=...)`), `files_per_load` per job.

    Neither question may stop a training job: when the cluster cannot answer, every file
    counts as not cached; when it refuses loads (a reader's token may not start jobs),
    the view says so once and asks no more."""

    def __init__(self, client: Client, *, files_per_load: int = 5000) -> None:
        if files_per_load < 1:
            raise ValueError("files_per_load must be at least 1")
        self.client = client
        self.files_per_load = files_per_load
        self.loads_refused = False
        self.jobs: list[str] = []  # the load jobs this view started, oldest first

    def cached(self, paths: Sequence[str]) -> list[bool]:
        try:
            inodes = self.client.stat_many(list(paths), with_locations=True)
        except ReservoirError as exc:
            log.warning("cache_state_unknown", files=len(paths), error=str(exc))
            return [False] * len(paths)
        return [fully_cached(i) for i in inodes]

    def load(self, paths: Sequence[str]) -> None:
        for start in range(0, len(paths), self.files_per_load):
            if self.loads_refused:
                return
            chunk = list(paths[start : start + self.files_per_load])
            # A job names files below one path: the deepest directory they share.
            top = posixpath.commonpath(chunk) if len(chunk) > 1 else chunk[0]
            try:
                job = self.client.submit_load(top, files=chunk)
            except PermissionDenied as exc:
                self.loads_refused = True
                log.warning("cache_loads_refused", error=str(exc))
                return
            except ReservoirError as exc:
                log.warning("cache_load_not_started", files=len(chunk), error=str(exc))
                continue
            self.jobs.append(job.id)
            log.info("cache_load_started", job=job.id, path=top, files=len(chunk))
