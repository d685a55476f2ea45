"""The leader follows each mount's S3 event queue (`events_queue_url`) and applies what it
says to the namespace as it arrives, so a change shows in about a second instead of at
the next sync interval.

An event only says "look at this object again": the leader HEADs it (`sync_object`) and
stores what the under-store says now, or removes the inode when the object is gone, so a
late, repeated or reordered event still ends in the store's current state. A message is
deleted once all its events are applied; one whose events failed stays in the queue and
comes back after its visibility timeout (the queue's redrive policy bounds how often).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from reservoir.common import logs
from reservoir.common.config import MasterConfig
from reservoir.common.errors import InvalidArgument, ReservoirError
from reservoir.common.models import Inode, Mount

from .metadata_sync import NamespaceSync
from .mount_table import MountTable
from .namespace_store import NamespaceStore
from .s3_events import EventKind, S3Event, parse_s3_events, path_of
from .sqs_queue import QueueMessage, SqsQueue

log = logs.get_logger(__name__)

MissingParents = Callable[[Mount, str], Awaitable[list[Inode]]]


class EventFollowers:
    """One follower per mount with an event queue, kept in step with the mount table."""

    def __init__(
        self,
        mounts: MountTable,
        sync: NamespaceSync,
        namespace: NamespaceStore,
        missing_parents: MissingParents,
        config: MasterConfig,
    ) -> None:
        self._mounts = mounts
        self._sync = sync
        self._namespace = namespace
        self._missing_parents = missing_parents
        self._config = config
        self._following: dict[str, tuple[Mount, asyncio.Task[None]]] = {}

    async def tick(self) -> None:
        """Starts following the mounts that have a queue, stops the rest; a mount whose
        options changed (another queue, other credentials) is followed afresh."""
        wanted = {m.path: m for m in self._mounts.mounts() if m.options.events_queue_url}
        for path, (mount, task) in list(self._following.items()):
            if task.done() and not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                # Not an under-store error it waits out: a bug, or a setting that cannot
                # work. Started again next tick, as a loop of its own would be.
                log.error("events_follower_failed", path=path, error=repr(exc), exc_info=exc)
            if wanted.get(path) != mount or task.done():
                del self._following[path]
                await _stopped(task)
        for path, mount in wanted.items():
            if path not in self._following:
                task = asyncio.create_task(self._follow(mount), name=f"events:{path}")
                self._following[path] = (mount, task)

    async def stop(self) -> None:
        following, self._following = self._following, {}
        for _, task in following.values():
            await _stopped(task)

    async def _follow(self, mount: Mount) -> None:
        config = self._config
        timeout_s = config.ufs.timeout_s + config.events_wait_s
        pause = config.events_backoff_s
        queue: SqsQueue | None = None
        log.info("events_followed", path=mount.path, queue=mount.options.events_queue_url)
        while True:
            try:
                if queue is None:
                    queue = await self._sync.ufs(
                        lambda: SqsQueue(
                            mount.options, timeout_s=timeout_s, retries=config.ufs.retries
                        )
                    )
                messages = await self._sync.ufs(
                    queue.receive,
                    config.events_wait_s,
                    config.events_batch,
                    config.events_visibility_s,
                )
                done = await self.apply(mount, messages)
                await self._sync.ufs(queue.delete, done)
                pause = config.events_backoff_s
            except ReservoirError as exc:
                log.warning(
                    "events_receive_failed",
                    path=mount.path,
                    queue=mount.options.events_queue_url,
                    error=str(exc),
                    retry_s=round(pause, 2),
                )
                await asyncio.sleep(pause * random.uniform(0.5, 1.0))
                pause = min(2 * pause, config.events_backoff_max_s)

    async def apply(self, mount: Mount, messages: list[QueueMessage]) -> list[str]:
        """Applies the messages' events to the namespace; returns the receipts of the
        messages that are done with (applied, or never applicable)."""
        done: list[str] = []
        for message in messages:
            try:
                events = parse_s3_events(message.body)
            except InvalidArgument as exc:
                log.warning("events_message_ignored", path=mount.path, error=str(exc))
                done.append(message.receipt)  # it will never parse: keep no poison
                continue
            try:
                for event in events:
                    await self.apply_event(mount, event)
            except ReservoirError as exc:
                log.warning("events_not_applied", path=mount.path, error=str(exc))
                continue
            done.append(message.receipt)
        return done

    async def apply_event(self, mount: Mount, event: S3Event) -> EventKind | None:
        """What the object is now in the namespace ("created": stored; "removed": gone);
        None for an object that is not below the mount."""
        path = path_of(mount, event.bucket, event.key)
        if path is None:
            return None
        inode = await self._sync.sync_object(mount, path)
        if inode is None:
            log.info("events_applied", path=path, kind=event.kind, now="removed")
            return "removed"
        # A file in a directory not stored yet: the directories appear in their parents.
        parents = await self._missing_parents(mount, path)
        if parents:
            await self._namespace.put_many(parents)
        log.info("events_applied", path=path, kind=event.kind, now="stored", etag=inode.etag)
        return "created"


async def _stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
