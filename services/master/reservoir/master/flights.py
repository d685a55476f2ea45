"""Single flight: the callers that ask one question at once (a directory's listing, a
path's HEAD) share one answer, asked once. A flight answers its callers as soon as it has
the answer, then may go on (storing what it found in etcd); until it ends, a caller that
comes joins it rather than asking again, so no later answer is stored before an earlier
one. A failure reaches every caller waiting; the next caller asks again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _retrieve(future: asyncio.Future[V]) -> None:
    if not future.cancelled():
        future.exception()  # the callers that still wait have it; none may be left


class Flights(Generic[K, V]):
    def __init__(self) -> None:
        self._flights: dict[K, asyncio.Future[V]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def join(
        self,
        key: K,
        find: Callable[[], Awaitable[V]],
        then: Callable[[V], Awaitable[None]],
    ) -> V:
        """The answer of the flight for `key`: `find()`'s, from a flight started now if
        none is under way; `then(answer)` runs after the callers have it, in the flight."""
        answer = self._flights.get(key)
        if answer is None:
            answer = asyncio.get_running_loop().create_future()
            answer.add_done_callback(_retrieve)
            self._flights[key] = answer
            task = asyncio.create_task(self._fly(answer, find, then))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda _: self._flights.pop(key, None))
        # Shielded: a caller that gives up does not cancel the flight others wait on.
        return await asyncio.shield(answer)

    @staticmethod
    async def _fly(
        answer: asyncio.Future[V],
        find: Callable[[], Awaitable[V]],
        then: Callable[[V], Awaitable[None]],
    ) -> None:
        try:
            found = await find()
        except asyncio.CancelledError:
            answer.cancel()
            raise
        except Exception as exc:
            answer.set_exception(exc)
            return
        answer.set_result(found)
        await then(found)
