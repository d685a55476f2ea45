"""Watches on the metadata store: the changes under a key prefix, as they happen, and
`PrefixFollower`, which keeps a local mirror of a prefix current with them.

`MetadataStore.watch_prefix` returns a `KeyChanges`: iterate it for changes, `aclose()` it
to end the watch (also when it was never iterated, so a failed setup leaks nothing).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from reservoir.common import logs
from reservoir.common.errors import Unavailable

if TYPE_CHECKING:
    from reservoir.common.metadata.metadata_store import MetadataStore

log = logs.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class KeyChange:
    """One change seen by a watch: the key's new value, or None when it was deleted."""

    key: bytes
    value: bytes | None


class KeyChanges(abc.ABC):
    """An open watch. Iterating raises Unavailable when the store connection breaks."""

    def __aiter__(self) -> KeyChanges:
        return self

    @abc.abstractmethod
    async def __anext__(self) -> KeyChange: ...

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Ends the watch; idempotent."""


class QueueChanges(KeyChanges):
    """Changes handed over in-process through a queue (the memory:// store)."""

    def __init__(self, queue: asyncio.Queue[KeyChange], on_close: Callable[[], None]) -> None:
        self._queue = queue
        self._on_close: Callable[[], None] | None = on_close

    async def __anext__(self) -> KeyChange:
        return await self._queue.get()

    async def aclose(self) -> None:
        if self._on_close is not None:
            self._on_close()
            self._on_close = None


class EtcdChanges(KeyChanges):
    """An aetcd watch: its events as KeyChange, its failures and its end as Unavailable."""

    def __init__(
        self, watch: Any, prefix: bytes, client_error: type[Exception], timeout_s: float
    ) -> None:
        self._watch = watch
        self._timeout_s = timeout_s
        self._events = watch.__aiter__()
        self._prefix = prefix
        self._client_error = client_error
        self._closed = False

    async def __anext__(self) -> KeyChange:
        try:
            event = await self._events.__anext__()
        except StopAsyncIteration:
            raise Unavailable(
                f"etcd watch of {self._prefix!r} ended (etcd connection closed)"
            ) from None
        except self._client_error as exc:
            raise Unavailable(f"etcd watch of {self._prefix!r} broke: {exc}") from exc
        value = None if event.kind == "DELETE" else bytes(event.kv.value)
        return KeyChange(bytes(event.kv.key), value)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            # Cancelling asks etcd over the watch's stream, which a process that was
            # paused (SIGSTOP, a long GC) may find dead: without a deadline the caller (a
            # master stepping down) would wait on it for good.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._watch.cancel(), self._timeout_s)


class PrefixMirror(Protocol):
    """What a `PrefixFollower` keeps current: a local copy of one prefix of the store."""

    def replace_all(self, pairs: list[tuple[bytes, bytes]]) -> None:
        """The whole prefix, as loaded (after the watch was set up or set up again)."""

    def apply(self, key: bytes, value: bytes | None) -> None:
        """One change the watch saw (value None: deleted)."""


class PrefixFollower:
    """Follows one prefix of the metadata store into a mirror: watches it, then loads it
    whole (so nothing between the two is missed), then applies every change until the
    watch breaks; a broken watch is set up again after a jittered pause that doubles up to
    `max_backoff_s` (and resets once a watch is established)."""

    def __init__(
        self,
        store: MetadataStore,
        prefix: bytes,
        mirror: PrefixMirror,
        *,
        name: str,  # log events: <name>_following, <name>_watch_broken
        backoff_s: float = 0.5,
        max_backoff_s: float = 10.0,
    ) -> None:
        self._store = store
        self._prefix = prefix
        self._mirror = mirror
        self._name = name
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self.following = False  # the mirror is current: loaded and watched
        self.watches = 0  # how many times following started

    async def follow_once(self) -> None:
        changes = await self._store.watch_prefix(self._prefix)
        try:
            self._mirror.replace_all(await self._store.get_prefix(self._prefix))
            self.following = True
            self.watches += 1
            log.info(f"{self._name}_following")
            async for change in changes:
                self._mirror.apply(change.key, change.value)
        finally:
            self.following = False
            await changes.aclose()

    async def follow(self) -> None:
        """Follows for the life of the process."""
        failures = 0
        while True:
            watches = self.watches
            try:
                await self.follow_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    f"{self._name}_watch_broken",
                    error=str(exc),
                    error_type=type(exc).__name__,
                )
            failures = 0 if self.watches > watches else failures + 1
            pause = min(self._max_backoff_s, self._backoff_s * 2 ** min(failures, 16))
            await asyncio.sleep(pause * random.uniform(0.5, 1.0))
