"""Watches on the metadata store: the changes under a key prefix, as they happen.

`MetadataStore.watch_prefix` returns a `KeyChanges`: iterate it for changes, `aclose()` it
to end the watch (also when it was never iterated, so a failed setup leaks nothing).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import Unavailable


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

    def __init__(self, watch: Any, prefix: bytes, client_error: type[Exception]) -> None:
        self._watch = watch
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
            with contextlib.suppress(Exception):
                await self._watch.cancel()
