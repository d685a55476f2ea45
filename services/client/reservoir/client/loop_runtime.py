"""The event-loop thread a blocking `Client` runs its `AsyncClient` on, and what happens to
it when the process forks.

gRPC's asyncio channels cannot cross a fork: a child that inherits them (and the loop
thread that drove them, which does not exist in the child) hangs or crashes on its first
call, GRPC_ENABLE_FORK_SUPPORT or not. So just before any fork every live runtime closes
its channels and stops its thread, leaving gRPC idle; parent and child alike start a fresh
runtime on their next call. A fork costs the parent its connections, not correctness.
grpc.aio channels a program makes itself, outside any `Client`, are not this hook's to
close: while one lives, a forked child's gRPC calls still wait forever.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

from reservoir.common import config as cfg
from reservoir.common import logs

from .async_client import AsyncClient

log = logs.get_logger(__name__)
T = TypeVar("T")

_STOP_TIMEOUT_S = 5.0


class LoopRuntime:
    """One `AsyncClient` on a private event loop thread, started on first use, stopped at
    a fork or on close, and started again after a fork."""

    def __init__(self, config: cfg.ClientConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: AsyncClient | None = None
        self._closed = False
        _live.add(self)

    @property
    def client(self) -> AsyncClient:
        """The running `AsyncClient`, started here if it is not."""
        return self._running()[1]

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the client runs on, started here if it is not."""
        return self._running()[0]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs `coro` on the loop thread and waits for its result."""
        try:
            loop, _ = self._running()
        except BaseException:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._stop_locked()

    # ---- internals ------------------------------------------------------------------------

    _owner_process = -1  # the `_process` it was started in

    def _running(self) -> tuple[asyncio.AbstractEventLoop, AsyncClient]:
        loop, client = self._loop, self._client
        if loop is not None and client is not None and self._owner_process == _process:
            return loop, client
        return self._start()

    def _start(self) -> tuple[asyncio.AbstractEventLoop, AsyncClient]:
        with self._lock:
            if self._closed:
                raise ValueError("operation on a closed Reservoir client")  # as a closed file
            loop, client = self._loop, self._client
            if loop is not None and client is not None and self._owner_process == _process:
                return loop, client
            # A runtime inherited from a parent that forked without the hook running (it
            # always runs for os.fork; this is the belt to its braces): drop it unused.
            self._loop = self._thread = self._client = None
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="reservoir-client", daemon=True)
            thread.start()
            try:
                # Channels bind to the loop they are made on.
                client = asyncio.run_coroutine_threadsafe(_make(self.config), loop).result()
            except BaseException:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(_STOP_TIMEOUT_S)
                raise
            self._loop, self._thread, self._client = loop, thread, client
            self._owner_process = _process
            return loop, client

    def _stop_locked(self) -> None:
        loop, thread, client = self._loop, self._thread, self._client
        self._loop = self._thread = self._client = None
        if loop is None or thread is None or client is None or self._owner_process != _process:
            return
        if loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(_shutdown(client), loop).result(_STOP_TIMEOUT_S)
            except Exception as exc:  # a close that fails must not stop the fork or exit
                log.warning("client_close_failed", error=repr(exc))
            loop.call_soon_threadsafe(loop.stop)
            thread.join(_STOP_TIMEOUT_S)
        if not thread.is_alive():
            loop.close()

    def _park_for_fork(self) -> bool:
        """Stops the loop and closes the channels; True when there were some."""
        # Taken without blocking: a fork from inside a call on this runtime (a thread holding
        # the lock) must not deadlock; that runtime is then left to the `_process` check.
        if not self._lock.acquire(blocking=False):
            return False
        try:
            running = self._client is not None
            self._stop_locked()
            return running
        finally:
            self._lock.release()


async def _make(config: cfg.ClientConfig) -> AsyncClient:
    return AsyncClient(config=config)


async def _shutdown(client: AsyncClient) -> None:
    """Closes the channels and ends every call still running on the loop, so a caller
    waiting on one (another thread, at a fork) gets an error instead of waiting forever."""
    await client.close()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.wait(others, timeout=_STOP_TIMEOUT_S / 2) if others else None


_live: weakref.WeakSet[LoopRuntime] = weakref.WeakSet()


def _before_fork() -> None:
    parked = False
    for runtime in list(_live):
        parked = runtime._park_for_fork() or parked
    if parked:
        # grpc.aio keeps its poller thread while any channel object exists, closed or not
        # (it counts them in constructors and destructors). A child forked with that count
        # above zero waits forever on a poller it does not have; closed channels still held
        # by reference cycles are freed here so the count reaches zero before the fork.
        gc.collect()


# Which process this is, counted up in every forked child: a module global read on each call
# (every read goes through it) where os.getpid() would be a system call.
_process = 0


def _after_fork_in_child() -> None:
    global _process
    _process += 1


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
