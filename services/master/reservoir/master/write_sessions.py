"""Files written through Reservoir: opened as a multipart upload, published on close.

`begin` checks the mount takes writes, starts the upload in the under-store and records it
in etcd (`writes/<id>`: path, key, upload id, deadline). The writer uploads the parts and
keeps the record alive. `publish` completes the upload and stores the new inode: the file
appears, whole, to every reader at once; until then they see the previous version or
nothing. A record whose deadline passes (its writer died) is aborted by the leading master,
so no multipart garbage is left behind; a writer that fails aborts at once.

Publishes of one path are serialised here, so the store and the namespace agree on which
close came last.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from reservoir.common import logs, paths
from reservoir.common.config import MasterConfig
from reservoir.common.errors import (
    AlreadyExists,
    Conflict,
    DataLoss,
    InvalidArgument,
    IsADirectory,
    NotFound,
    ReadOnly,
    ReservoirError,
)
from reservoir.common.metadata.metadata_store import MetadataStore
from reservoir.common.metadata.write_records import WRITES, WriteRecord, write_key
from reservoir.common.models import Inode, Mount
from reservoir.common.understore.under_store import Part, UnderStore
from reservoir.common.write_terms import WriteTerms

from .metadata_sync import NamespaceSync, dir_inode, now_ms
from .mount_table import MountTable
from .namespace_store import NamespaceStore

log = logs.get_logger(__name__)

# How long at least a published write's record stays (its writer commits its staged
# blocks right after publishing; a slow one still finds the record).
_PUBLISHED_KEPT_MS = 60_000


@dataclass(frozen=True)
class WriteAsk:
    """What a writer asks of a write (BeginWriteRequest)."""

    path: str
    terms: WriteTerms = field(default_factory=WriteTerms)
    whole: bool = False  # one PUT by the writer, no multipart upload


def writable_mount(mounts: MountTable, path: str) -> tuple[str, Mount]:
    """The normalised path and its mount, when files may be written there: a path below
    a writable mount. ReadOnly for a read-only mount (nothing is sent to the store)."""
    path = paths.normalize(path)
    mount = mounts.mount_for(path)
    if mount is None:
        raise NotFound(f"{path}: not under any mount")
    if path == mount.path:
        raise IsADirectory(f"{path}: is a mount's root directory")
    if not mount.options.writable:
        raise ReadOnly(
            f"{path}: the mount at {mount.path} is read-only (mount it with --writable "
            "to write through Reservoir)"
        )
    return path, mount


class WriteSessions:
    def __init__(
        self,
        store: MetadataStore,
        config: MasterConfig,
        mounts: MountTable,
        namespace: NamespaceStore,
        sync: NamespaceSync,
        drop_blocks: Callable[[list[str]], Awaitable[None]],
    ) -> None:
        """`drop_blocks`: evicts the given file ids' blocks from every worker (an
        overwritten version is never served again, even to a reader whose stat is old)."""
        self._store = store
        self._config = config
        self.mounts = mounts
        self.namespace = namespace
        self.sync = sync
        self._drop_blocks = drop_blocks
        # One lock per path ever published by this master: a few bytes each.
        self._publishing: dict[str, asyncio.Lock] = {}
        # (mount path, key) of the empty directory objects this master made (make_dirs):
        # a directory's goes when its first file is published. One made by another
        # master, or before a restart, stays (an empty object, no harm).
        self.markers: set[tuple[str, str]] = set()
        self._reaper: asyncio.Task[None] | None = None

    @property
    def timeout_ms(self) -> int:
        return int(self._config.write_abort_timeout_s * 1000)

    async def writes_of(self, mount: Mount) -> UnderStore:
        """The mount's store, to write (the mount table lets only stores that write be
        mounted writable)."""
        return await self.sync.under_store(mount)

    # ---- a write's life ---------------------------------------------------------------

    async def begin(self, ask: WriteAsk) -> tuple[WriteRecord, Mount]:
        path, mount = writable_mount(self.mounts, ask.path)
        terms = ask.terms
        if ask.whole and terms.conditional:
            raise InvalidArgument(f"{path}: a write in one PUT cannot be conditional")
        stored = await self.namespace.get(path)
        if stored is not None and stored.is_dir:
            raise IsADirectory(f"{path}: is a directory")
        writes = await self.writes_of(mount)
        key = path[len(mount.path) + 1 :]
        now = now_ms()
        record = WriteRecord(
            id=uuid.uuid4().hex,
            path=path,
            mount_path=mount.path,
            key=key,
            upload_id="",
            started_ms=now,
            expires_ms=now + self.timeout_ms,
            metadata=terms.metadata.to_json() if terms.metadata else "",
            if_absent=terms.if_absent,
            if_match=terms.if_match.strip('"'),
            whole=ask.whole,
        )
        # Early, so a write bound to fail sends no bytes; again at the publish, for real.
        await self._check_condition(record, mount)
        if not ask.whole:
            upload_id = await self.sync.ufs(writes.create_upload, key, terms.metadata)
            record = replace(record, upload_id=upload_id)
        await self._store.put(write_key(record.id), record.to_json())
        log.info("write_started", path=path, write=record.id)
        return record, mount

    async def _record(self, write_id: str) -> WriteRecord:
        raw = await self._store.get(write_key(write_id))
        if raw is None or WriteRecord.from_json(raw).published_file_id:
            raise NotFound(
                f"write {write_id} is not open: it was published, aborted, or timed out "
                "(RESERVOIR_WRITE_ABORT_TIMEOUT) and its upload was dropped"
            )
        return WriteRecord.from_json(raw)

    async def keep(self, write_id: str) -> None:
        record = await self._record(write_id)
        kept = replace(record, expires_ms=now_ms() + self.timeout_ms)
        await self._store.put(write_key(write_id), kept.to_json())

    async def _check_condition(self, record: WriteRecord, mount: Mount) -> None:
        """The write's condition against the object the store holds now (a HEAD: the
        store is the truth, also for an object no listing brought in yet)."""
        if not (record.if_absent or record.if_match):
            return
        ufs = await self.sync.under_store(mount)
        try:
            current: str | None = (await self.sync.ufs(ufs.head, record.key)).etag
        except NotFound:
            current = None
        if record.if_absent and current is not None:
            raise AlreadyExists(f"{record.path}: exists, and the write asked for a new file")
        if record.if_match:
            if current is None:
                raise NotFound(f"{record.path}: no such file (the write asked for its ETag)")
            if current.strip('"') != record.if_match:
                raise Conflict(
                    f"{record.path}: its ETag is {current}, not {record.if_match} as the "
                    "write asked"
                )

    async def publish(self, write_id: str, parts: list[Part], size: int, etag: str = "") -> Inode:
        """Completes the upload (a whole write: checks its PUT is what the store holds),
        then stores the inode; the new version's file id."""
        record = await self._record(write_id)
        mount = self.mounts.mount_for(record.path)
        if mount is None or mount.path != record.mount_path:
            await self.abort(write_id)
            raise NotFound(f"{record.path}: its mount was removed or replaced while written")
        writes = await self.writes_of(mount)
        lock = self._publishing.setdefault(record.path, asyncio.Lock())
        async with lock:
            old = await self.namespace.get(record.path)
            ufs = await self.sync.under_store(mount)
            try:
                await self._check_condition(record, mount)
                if record.whole:
                    info = await self.sync.ufs(ufs.head, record.key)
                else:
                    info = await self.sync.ufs(
                        writes.complete_upload,
                        record.key,
                        record.upload_id,
                        sorted(parts, key=_n),
                        record.object_metadata,
                    )
            except ReservoirError:
                await self.abort(write_id)
                raise
            if record.whole and info.etag.strip('"') != etag.strip('"'):
                # Another PUT of the key landed after this one: the store holds its object,
                # which this write's blocks do not describe.
                await self._store.delete(write_key(write_id))
                raise Conflict(
                    f"{record.path}: replaced in the store by another write before this one "
                    "was published"
                )
            if info.size != size:
                # Another writer's object replaced ours between completion and HEAD: only
                # possible outside Reservoir. Its object is not ours to describe.
                await self._store.delete(write_key(write_id))
                raise DataLoss(
                    f"{record.path}: the store holds {info.size} bytes after the upload of "
                    f"{size}: the object was replaced outside Reservoir meanwhile"
                )
            inode = replace(
                self.sync.file_inode(mount, ufs, record.path, info),
                metadata=record.object_metadata,
            )
            parents = await self.missing_parents(mount, record.path)
            await self.namespace.write([inode, *parents], ())
            # Kept a while as published: workers keep the write's staged blocks under
            # this file id, and under no other.
            published = replace(
                record,
                published_file_id=inode.file_id,
                expires_ms=now_ms() + max(self.timeout_ms, _PUBLISHED_KEPT_MS),
            )
            await self._store.put(write_key(write_id), published.to_json())
        if old is not None and old.file_id and old.file_id != inode.file_id:
            await self._drop_blocks([old.file_id])
        await self._drop_markers(mount, record.key, writes)
        log.info("write_published", path=record.path, size=size, etag=inode.etag, write=write_id)
        return inode

    async def _drop_markers(self, mount: Mount, key: str, writes: UnderStore) -> None:
        """Deletes the empty directory objects this master made above a file just
        published: the file keeps its directories in S3 now."""
        parts = key.split("/")[:-1]
        above = {(mount.path, "/".join(parts[: n + 1]) + "/") for n in range(len(parts))}
        doomed = above & self.markers
        if not doomed:
            return
        try:
            await self.sync.ufs(writes.delete, sorted(k for _, k in doomed))
        except ReservoirError as exc:
            log.warning("directory_markers_not_deleted", key=key, error=str(exc))
            return
        self.markers -= doomed

    async def abort(self, write_id: str) -> None:
        """Drops the upload and its record; an unknown write is already gone."""
        try:
            record = await self._record(write_id)
        except NotFound:
            return
        await self._abort(record, "aborted")

    async def _abort(self, record: WriteRecord, why: str) -> None:
        mount = self.mounts.mount_for(record.path)
        if record.published_file_id or record.whole:
            pass  # completed, or one PUT: nothing left in the store to drop
        elif mount is not None and mount.path == record.mount_path:
            writes = await self.writes_of(mount)
            await self.sync.ufs(writes.abort_upload, record.key, record.upload_id)
        await self._store.delete(write_key(record.id))
        log.info("write_" + why, path=record.path, write=record.id)

    async def missing_parents(self, mount: Mount, path: str) -> list[Inode]:
        """Directory inodes for the ancestors below the mount not stored yet (a file
        written into a new directory makes it appear in its parent's listing)."""
        ancestors: list[str] = []
        parent = paths.parent_of(path)
        while parent != mount.path and len(parent) > len(mount.path):
            ancestors.append(parent)
            parent = paths.parent_of(parent)
        stored = await self.namespace.get_many(ancestors)
        now = now_ms()
        return [
            dir_inode(p, mount, now) for p, s in zip(ancestors, stored, strict=True) if s is None
        ]

    # ---- writers that died ------------------------------------------------------------

    async def reap(self) -> int:
        """Aborts every write past its deadline; how many."""
        now = now_ms()
        reaped = 0
        for _, raw in await self._store.get_prefix(WRITES):
            record = WriteRecord.from_json(raw)
            if record.expires_ms > now:
                continue
            try:
                await self._abort(record, "forgotten" if record.published_file_id else "timed_out")
                reaped += 1
            except ReservoirError as exc:
                log.warning("write_abort_failed", path=record.path, error=str(exc))
        return reaped

    def start(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_forever())

    async def stop(self) -> None:
        task, self._reaper = self._reaper, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _reap_forever(self) -> None:
        # A few looks per timeout: a dead writer's upload goes within ~1.25 timeouts.
        interval = max(0.2, self._config.write_abort_timeout_s / 4)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.reap()
            except ReservoirError as exc:
                log.warning("write_reap_failed", error=str(exc))


def _n(part: Part) -> int:
    return part.number
