"""Cache rules: pins and TTLs on Reservoir paths, kept in etcd, followed by every worker.

- **Pin** (`reservoir pin PATH`): the files below PATH, as they are when pinned, are kept
  in the cache and never evicted. The master lists the path (metadata load), checks that
  the files fit in what the workers have left for pinned blocks (each block counted on
  its home worker, the one readers and load jobs use), writes one key per pinned file
  (the workers watch them and know a pinned block by its file id, also for blocks they
  find on disk after a restart), and starts a load job that brings the files in. Pinning
  the path again picks up files added since.
- **TTL** (`reservoir ttl set PATH DURATION`, on a mount path for the whole mount): a
  block below PATH older than the TTL — counted from when it landed in the worker — is
  never served; the next read fetches it again, and expired blocks are dropped first.
- **Free** (`reservoir free PATH`): every worker drops the path's blocks now, from every
  tier. Pinned files are kept (unpin them first), as in Alluxio.

Rules are admin operations and rare, so every call reads etcd afresh: a standby master
that takes over has nothing to rebuild.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Protocol

from reservoir.common import logs, paths
from reservoir.common.blocks.block_file import HEADER_SIZE
from reservoir.common.config import MasterConfig, format_size
from reservoir.common.errors import InvalidArgument, NotFound, ResourceExhausted
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import MetadataStore
from reservoir.common.models import CacheRule, Inode, Mount, WorkerRecord
from reservoir.common.placement import block_key, placement_of
from reservoir.v1 import worker_pb2

from .job_run import Membership
from .jobs import LoadJobs
from .locations import BlockLocationTable

log = logs.get_logger(__name__)


class RuleNamespace(Protocol):
    """What the rules need of the master's namespace."""

    async def load_all_metadata(self, path: str) -> None: ...

    async def file_info(self, path: str, with_locations: bool = False) -> Inode: ...

    def subtree(self, path: str) -> AsyncIterator[list[Inode]]:
        """Every stored inode below `path`, a page at a time."""
        ...


class MountLookup(Protocol):
    def mount_for(self, path: str) -> Mount | None: ...


class CacheWorkers(Protocol):
    """The calls the rules make to workers (see common/worker_calls.py)."""

    async def stats(self, worker: WorkerRecord) -> worker_pb2.WorkerStats: ...

    async def free_blocks(
        self, worker: WorkerRecord, file_ids: list[str]
    ) -> worker_pb2.FreeBlocksResponse: ...


@dataclass(frozen=True, slots=True)
class FreeResult:
    files: int
    freed_blocks: int
    freed_bytes: int
    pinned_files: int


@dataclass(frozen=True, slots=True)
class _PinnedFile:
    size: int
    block_size: int

    def blocks(self) -> range:
        return range((self.size + self.block_size - 1) // self.block_size)

    def length(self, index: int) -> int:
        return min(self.block_size, self.size - index * self.block_size)


def _now_ms() -> int:
    return int(time.time() * 1000)


class CacheRules:
    def __init__(
        self,
        store: MetadataStore,
        config: MasterConfig,
        *,
        namespace: RuleNamespace,
        membership: Membership,
        mounts: MountLookup,
        workers: CacheWorkers,
        jobs: LoadJobs,
        locations: BlockLocationTable,
    ) -> None:
        self._store = store
        self._config = config
        self._namespace = namespace
        self._membership = membership
        self._mounts = mounts
        self._workers = workers
        self._jobs = jobs
        self._locations = locations
        # Two pins checked at once could each fit alone and not together.
        self._lock = asyncio.Lock()

    # ---- reading ----------------------------------------------------------------------

    async def rules(self) -> list[CacheRule]:
        pairs = await self._store.get_prefix(keyspace.CACHE_RULES)
        return [CacheRule.from_json(v) for _, v in pairs]

    async def _rule(self, path: str) -> CacheRule | None:
        raw = await self._store.get(keyspace.cache_rule_key(path))
        return None if raw is None else CacheRule.from_json(raw)

    def _new_rule(self, path: str) -> CacheRule:
        """An empty rule for `path`, which must be at or below a mount."""
        mount = self._mounts.mount_for(path)
        if mount is None:
            raise InvalidArgument(f"{path} is not under any mount: rules apply to mounted paths")
        relative = "" if path == mount.path else path[len(mount.path) + 1 :]
        return CacheRule(path=path, mount_path=mount.path, ufs_prefix=mount.uri + relative)

    async def _files(self, path: str) -> list[Inode]:
        info = await self._namespace.file_info(path)
        if not info.is_dir:
            return [info]
        return [
            i async for page in self._namespace.subtree(info.path) for i in page if not i.is_dir
        ]

    async def _pinned_files(self, *, besides: str = "") -> dict[str, _PinnedFile]:
        """Every pinned file (by file id) of every rule but `besides`."""
        pinned: dict[str, _PinnedFile] = {}
        skip = keyspace.pinned_prefix(besides) if besides else None
        async for page in self._store.scan_prefix(keyspace.PINNED):
            for key, value in page:
                if skip is not None and key.startswith(skip):
                    continue
                pinned[keyspace.pinned_file_id(key)] = _PinnedFile(**json.loads(value))
        return pinned

    # ---- pins -------------------------------------------------------------------------

    async def pin(self, path: str) -> tuple[CacheRule, str]:
        """Pins the files below `path` and starts loading them; returns the rule and the
        load job's id. RESOURCE_EXHAUSTED when they do not fit."""
        path = paths.normalize(path)
        rule = self._new_rule(path)
        async with self._lock:
            await self._namespace.load_all_metadata(path)
            files = {f.file_id: f for f in await self._files(path) if f.file_id}
            mine = {fid: _PinnedFile(f.size, f.block_size) for fid, f in files.items()}
            await self._check_fits(path, mine, await self._pinned_files(besides=path))
            old = await self._rule(path)
            rule = replace(
                old or rule,
                pinned=True,
                pinned_files=len(mine),
                pinned_bytes=sum(f.size for f in mine.values()),
                updated_ms=_now_ms(),
            )
            await self._store.put(keyspace.cache_rule_key(path), rule.to_json())
            await self._store.delete_prefix(keyspace.pinned_prefix(path))
            await self._store.put_many(
                [
                    (
                        keyspace.pinned_key(path, fid),
                        json.dumps({"size": f.size, "block_size": f.block_size}).encode(),
                    )
                    for fid, f in mine.items()
                ]
            )
        job = await self._jobs.submit(path, 1, [], False)
        log.info("pinned", path=path, files=rule.pinned_files, bytes=rule.pinned_bytes, job=job.id)
        return rule, job.id

    async def _check_fits(
        self, path: str, mine: dict[str, _PinnedFile], others: dict[str, _PinnedFile]
    ) -> None:
        """Counts each pinned block on its home worker (with the block file's header
        where the worker keeps pinned blocks on disk) against the room that worker has
        for pinned blocks: its disk tiers when it has any (a pinned block may leave memory
        once it is on disk), else its memory."""
        workers = await self._membership.workers()
        if not workers:
            raise ResourceExhausted(f"cannot pin {path}: no live workers")
        stats = await asyncio.gather(*(self._workers.stats(w) for w in workers))
        room: dict[str, int] = {}
        on_disk: dict[str, bool] = {}
        for worker, s in zip(workers, stats, strict=True):
            disks = [t for t in s.tiers if t.name == "disk" and t.in_service]
            on_disk[worker.id] = bool(disks)
            room[worker.id] = (
                sum(t.capacity_bytes for t in disks) if disks else s.tiers[0].capacity_bytes
            )
        table = placement_of(workers)

        def need(files: dict[str, _PinnedFile]) -> dict[str, int]:
            per_worker: dict[str, int] = defaultdict(int)
            for fid, f in files.items():
                for index in f.blocks():
                    home = table.homes(block_key(fid, index))[0]
                    per_worker[home] += f.length(index) + (HEADER_SIZE if on_disk[home] else 0)
            return per_worker

        already = need(others)
        total = need({**others, **mine})
        size = sum(f.size for fid, f in mine.items() if fid not in others)
        worst = max(workers, key=lambda w: total[w.id] - room[w.id]).id
        if total[worst] <= room[worst]:
            return
        raise ResourceExhausted(
            f"cannot pin {path} ({format_size(size)} in {len(mine)} files): it does not fit "
            f"in the cache. Worker {worst} would hold "
            f"{format_size(total[worst])} of pinned blocks and has room for "
            f"{format_size(room[worst])} ({format_size(already[worst])} pinned already); "
            f"the cluster has room for {format_size(sum(room.values()))} of pinned blocks, "
            f"{format_size(sum(already.values()))} of it pinned already. Unpin something "
            "or add capacity."
        )

    async def unpin(self, path: str) -> CacheRule:
        path = paths.normalize(path)
        async with self._lock:
            rule = await self._rule(path)
            if rule is None or not rule.pinned:
                raise NotFound(f"{path} is not pinned")
            await self._store.delete_prefix(keyspace.pinned_prefix(path))
            rule = replace(rule, pinned=False, pinned_files=0, pinned_bytes=0, updated_ms=_now_ms())
            await self._save(rule)
        log.info("unpinned", path=path)
        return rule

    # ---- TTLs -------------------------------------------------------------------------

    async def set_ttl(self, path: str, ttl_ms: int) -> CacheRule:
        path = paths.normalize(path)
        if ttl_ms <= 0:
            raise InvalidArgument("a TTL must be positive (clear it with `ttl clear`)")
        fresh = self._new_rule(path)
        async with self._lock:
            rule = replace(await self._rule(path) or fresh, ttl_ms=ttl_ms, updated_ms=_now_ms())
            await self._save(rule)
        log.info("ttl_set", path=path, ttl_ms=ttl_ms)
        return rule

    async def clear_ttl(self, path: str) -> CacheRule:
        path = paths.normalize(path)
        async with self._lock:
            rule = await self._rule(path)
            if rule is None or not rule.ttl_ms:
                raise NotFound(f"{path} has no TTL")
            rule = replace(rule, ttl_ms=0, updated_ms=_now_ms())
            await self._save(rule)
        log.info("ttl_cleared", path=path)
        return rule

    async def _save(self, rule: CacheRule) -> None:
        """Writes the rule, or deletes it when it neither pins nor expires anything."""
        if rule.pinned or rule.ttl_ms:
            await self._store.put(keyspace.cache_rule_key(rule.path), rule.to_json())
        else:
            await self._store.delete(keyspace.cache_rule_key(rule.path))

    # ---- free -------------------------------------------------------------------------

    async def free(self, path: str) -> FreeResult:
        """Drops the blocks of the files below `path` from every live worker now, but
        those of pinned files. The location table forgets them at once, so a `report`
        that follows is exact."""
        path = paths.normalize(path)
        files = await self._files(path)
        pinned = await self._pinned_files()
        to_free = sorted({f.file_id for f in files if f.file_id and f.file_id not in pinned})
        kept = sum(1 for f in files if f.file_id in pinned)
        batch = max(1, self._config.free_batch_files)

        async def one(worker: WorkerRecord) -> tuple[int, int]:
            blocks = nbytes = 0
            for start in range(0, len(to_free), batch):
                reply = await self._workers.free_blocks(worker, to_free[start : start + batch])
                for ref in reply.freed:
                    self._locations.drop(worker.id, ref.file_id, int(ref.index))
                blocks += len(reply.freed)
                nbytes += reply.freed_bytes
            return blocks, nbytes

        results = await asyncio.gather(*(one(w) for w in await self._membership.workers()))
        result = FreeResult(
            files=len(files),
            freed_blocks=sum(b for b, _ in results),
            freed_bytes=sum(n for _, n in results),
            pinned_files=kept,
        )
        log.info(
            "freed",
            path=path,
            files=result.files,
            blocks=result.freed_blocks,
            bytes=result.freed_bytes,
            pinned_kept=kept,
        )
        return result
