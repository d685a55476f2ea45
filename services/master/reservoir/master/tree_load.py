"""A recursive metadata load from flat listings: the under-store walks the tree.

A level-by-level load pays one LIST round trip per directory, in waves. Here a subtree is
one listing without a delimiter (S3 streams every key below a prefix in key order, 1,000
a page), and the directories are derived from the keys: because a subtree's keys are
contiguous in that order, the directories open along the current key form a stack, and a
directory is complete as soon as a key outside it arrives. Each complete directory is
made to agree with etcd at once (changed and new children written, vanished ones
removed, its listing marker carried by its entry in its parent), in the background while
the listing goes on; a parent is written only after its children, so a marker never
vouches for children that are not stored yet.

The first levels are listed with a delimiter until there are enough subtrees to walk
several at a time (`metadata_load_parallelism`): the under-store's own latency overlaps,
and the master holds a page per walk, the directories open along each walk's current
key, and the writes under way, never the namespace.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace

from reservoir.common import logs, paths
from reservoir.common.models import Inode, Mount
from reservoir.common.understore.under_store import ObjectInfo, UnderStore

from .metadata_sync import NamespaceSync, dir_inode, now_ms
from .namespace_store import NamespaceStore

log = logs.get_logger(__name__)

# Pages of a walk listed ahead of the directories being built from them.
_PAGES_AHEAD = 4
# A directory with more entries than this writes them as it goes (its names are kept to
# find what vanished): a directory of millions never holds its inodes in memory.
_FLUSH_ENTRIES = 10_000
# Levels listed with a delimiter, at most, looking for subtrees to walk side by side.
_SPLIT_LEVELS = 3
# How often progress is reported while the walks go on.
_PROGRESS_S = 0.5


class KeysOutOfOrder(Exception):
    """The under-store listed a key before one that sorts ahead of it: the directories
    cannot be derived from that listing (a level-by-level load still works)."""


@dataclass
class LoadCounts:
    listed: int = 0
    written: int = 0
    removed: int = 0
    skipped: int = 0  # keys no Reservoir path can express


@dataclass
class _Open:
    """A directory whose keys are still arriving."""

    path: str
    entries: list[Inode] = field(default_factory=list)
    # Every name seen, once the directory has written some entries early.
    flushed: set[str] | None = None
    # Its subdirectories' writes: it is written after them.
    below: list[asyncio.Task[None]] = field(default_factory=list)


class TreeLoad:
    def __init__(
        self,
        namespace: NamespaceStore,
        sync: NamespaceSync,
        parallelism: int,
        writes_in_flight: int = 16,
    ) -> None:
        self._namespace = namespace
        self._sync = sync
        self._parallelism = max(1, parallelism)
        self._writes = asyncio.Semaphore(max(1, writes_in_flight))
        # Complete directories waiting to be written, at most: past it the listing waits,
        # so a slow etcd bounds what the master holds instead of growing it.
        self._waiting = asyncio.Semaphore(max(1, writes_in_flight) * 4)

    async def run(self, mount: Mount, top: str) -> AsyncIterator[LoadCounts]:
        """Loads the tree below directory `top`; yields the running counts now and then
        and once more, final, at the end. What it finds changed is noted in the sync's
        `found` (found_changes.py)."""
        counts = LoadCounts()
        # The first levels, as a level-by-level load lists them, until the tree is wide
        # enough to walk several subtrees at a time.
        level = [top]
        subtrees: list[str] = []
        # A level's directory listed past this many entries is walked flat, files and
        # all, instead: a directory of millions is never one listing held in memory.
        bound = self._sync.list_bound
        for depth in range(_SPLIT_LEVELS):
            listings = await asyncio.gather(
                *(self._sync.sync_directory(mount, d, limit=bound) for d in level)
            )
            below: list[str] = []
            for directory, listing in zip(level, listings, strict=True):
                if not listing.complete:
                    # Its walk counts what it lists (the few files already written here
                    # are not counted as written twice, nor on every later load).
                    subtrees.append(directory)
                    continue
                counts.written += listing.written
                counts.listed += len(listing.children)
                counts.removed += listing.removed
                below.extend(c.path for c in listing.children if c.is_dir)
            yield counts
            if not below or len(below) >= self._parallelism or depth == _SPLIT_LEVELS - 1:
                subtrees.extend(below)
                break
            level = below
        ufs = await self._sync.under_store(mount)
        limit = asyncio.Semaphore(self._parallelism)

        async def walk(directory: str) -> None:
            async with limit:
                await self._walk(mount, ufs, directory, counts)

        walks = [asyncio.create_task(walk(d)) for d in subtrees]
        try:
            pending: set[asyncio.Task[None]] = set(walks)
            while pending:
                _, pending = await asyncio.wait(pending, timeout=_PROGRESS_S)
                yield counts
            for task in walks:
                task.result()  # the first failure, if any
        finally:
            for task in walks:
                task.cancel()
            await asyncio.gather(*walks, return_exceptions=True)
        if counts.skipped:
            log.warning("metadata_keys_skipped", path=top, skipped=counts.skipped)
        yield counts

    async def _walk(self, mount: Mount, ufs: UnderStore, root: str, counts: LoadCounts) -> None:
        """One subtree from one flat listing; its root's marker is written last."""
        prefix = "" if root == mount.path else root[len(mount.path) + 1 :] + "/"
        tasks: list[asyncio.Task[None]] = []
        try:
            await self._walk_keys(mount, ufs, root, prefix, counts, tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        stored = await self._namespace.get(root)
        marker = stored if stored is not None and stored.is_dir else dir_inode(root, mount)
        await self._namespace.put(replace(marker, listed_ms=now_ms()))

    async def _walk_keys(
        self,
        mount: Mount,
        ufs: UnderStore,
        root: str,
        prefix: str,
        counts: LoadCounts,
        tasks: list[asyncio.Task[None]],
    ) -> None:
        stack = [_Open(root)]
        names: list[str] = []  # the subdirectory names along the stack, below the root
        last_key = ""
        async for page in self._pages(ufs, prefix):
            for obj in page:
                if obj.key <= last_key:
                    raise KeysOutOfOrder(f"the under-store listed {obj.key!r} after {last_key!r}")
                last_key = obj.key
                parts = obj.key[len(prefix) :].split("/")
                *directories, name = parts
                if not _expressible(directories):
                    counts.skipped += 1
                    continue
                common = 0
                for have, want in zip(names, directories, strict=False):
                    if have != want:
                        break
                    common += 1
                while len(names) > common:
                    names.pop()
                    await self._close(mount, stack.pop(), stack[-1], counts, tasks)
                for part in directories[common:]:
                    names.append(part)
                    stack.append(_Open(paths.join(stack[-1].path, part)))
                if name == "":
                    continue  # a directory marker object: the directory exists, no file
                if not _expressible([name]):
                    counts.skipped += 1
                    continue
                here = stack[-1]
                child = paths.join(here.path, name)
                here.entries.append(self._sync.file_inode(mount, ufs, child, obj))
                counts.listed += 1
                if len(here.entries) >= _FLUSH_ENTRIES:
                    await self._flush(mount, here, counts)
        while len(stack) > 1:
            await self._close(mount, stack.pop(), stack[-1], counts, tasks)
        await self._store(mount, stack.pop(), counts)

    async def _pages(self, ufs: UnderStore, prefix: str) -> AsyncIterator[list[ObjectInfo]]:
        """The walk's pages, listed on the under-store pool a few pages ahead."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[list[ObjectInfo] | BaseException | None] = asyncio.Queue(_PAGES_AHEAD)
        stop = False

        def produce() -> None:
            pages: Iterator[list[ObjectInfo]] = ufs.walk(prefix)
            item: list[ObjectInfo] | BaseException | None
            try:
                for item in pages:
                    if stop:
                        return
                    asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()
                item = None
            except BaseException as exc:
                item = exc
            if not stop:
                asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

        producer = asyncio.ensure_future(self._sync.ufs(produce))
        try:
            while True:
                item = await queue.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop = True
            while not queue.empty():
                queue.get_nowait()  # unblocks a producer waiting to put
            await asyncio.gather(producer, return_exceptions=True)

    async def _close(
        self,
        mount: Mount,
        done: _Open,
        parent: _Open,
        counts: LoadCounts,
        tasks: list[asyncio.Task[None]],
    ) -> None:
        """`done` is complete: stored in the background (after its own subdirectories);
        its entry, carrying its listing marker, joins its parent's."""
        await self._waiting.acquire()
        task = asyncio.create_task(self._store(mount, done, counts))
        task.add_done_callback(lambda _: self._waiting.release())
        parent.below.append(task)
        tasks[:] = [t for t in tasks if _unsettled(t)]
        tasks.append(task)
        entry = replace(dir_inode(done.path, mount), listed_ms=now_ms())
        parent.entries.append(entry)
        counts.listed += 1
        # The parent's writes wait on this one: finished ones need not be remembered.
        parent.below = [t for t in parent.below if _unsettled(t)]

    async def _flush(self, mount: Mount, here: _Open, counts: LoadCounts) -> None:
        """Writes what changed among a big directory's entries so far, remembering only
        their names."""
        if here.flushed is None:
            here.flushed = set()
        here.flushed.update(e.path.rsplit("/", 1)[1] for e in here.entries)
        batch, here.entries = here.entries, []
        async with self._writes:
            stored = await self._namespace.get_many([e.path for e in batch])
            changed: list[Inode] = []
            for old, new in zip(stored, batch, strict=True):
                if old is None or not _same(old, new):
                    changed.append(new)
                    self._sync.found.saw(mount.path, old, new)
            await self._namespace.put_many(changed)
        counts.written += len(changed)

    async def _store(self, mount: Mount, done: _Open, counts: LoadCounts) -> None:
        """Makes etcd agree with a complete directory: what changed written, what is gone
        (with its subtree) removed."""
        await asyncio.gather(*done.below)
        async with self._writes:
            seen = {e.path.rsplit("/", 1)[1]: e for e in done.entries}
            kept = set(seen) | (done.flushed or set())
            changed: list[Inode] = []
            gone: list[str] = []
            # Subdirectories are rewritten whatever they were (their entries carry their
            # new listing markers) but count as written only when they are new.
            markers = 0
            async for page in self._namespace.children_pages(done.path):
                for old in page:
                    name = old.path.rsplit("/", 1)[1]
                    new = seen.pop(name, None)
                    if name not in kept:
                        gone.append(old.path)
                        if old.is_dir:
                            await self._namespace.delete_subtree(old.path)
                    elif new is not None and not _same(old, new):
                        changed.append(new)
                        self._sync.found.saw(mount.path, old, new)
                        markers += new.is_dir and old.is_dir
            for new in seen.values():  # not stored before
                changed.append(new)
                self._sync.found.saw(mount.path, None, new)
            await self._namespace.write(changed, gone)
        self._sync.found.saw_removed(mount.path, len(gone))
        counts.written += len(changed) - markers
        counts.removed += len(gone)


def _unsettled(task: asyncio.Task[None]) -> bool:
    """Still to be awaited: running, or ended otherwise than well."""
    return not task.done() or task.cancelled() or task.exception() is not None


def _same(stored: Inode, listed: Inode) -> bool:
    """Whether a stored inode says what the listing says; a directory's listing marker
    is always rewritten (the walk has just vouched for it)."""
    if listed.is_dir:
        return False
    return replace(stored, synced_ms=0) == replace(listed, synced_ms=0)


def _expressible(names: list[str]) -> bool:
    return all(name not in ("", ".", "..") and "\x00" not in name for name in names)
