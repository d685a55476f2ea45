"""SIGTERM aborts the files this process is writing, as Ctrl-C (SIGINT) already does.

Ctrl-C raises KeyboardInterrupt, so a writer's `with` block aborts its upload. SIGTERM
(`kill`, a container or a job scheduler stopping the process) ends the process at once
by default: the upload would stay open in the store until the master's
RESERVOIR_WRITE_ABORT_TIMEOUT. So, while a blocking `Client` writes, SIGTERM first tells
the master to abort every write this process has open (each WriteSession registers here
for its life), waits for that at most RESERVOIR_WRITE_SIGTERM_ABORT_TIMEOUT, then ends the
process as SIGTERM would have: the default disposition restored and the signal raised
again, so the exit status is "killed by SIGTERM" (143 in a shell), as callers expect.

The handler is the user's process's, so it is taken with care:
- installed only over the default disposition: a program that handles SIGTERM itself
  (or ignores it) keeps its handler, and its own exit (SystemExit, an exception through
  the `with`) aborts the writes as any exception does;
- installed from the main thread only (Python's rule), on the first `Client.open(path,
  "wb")` or `Client.write`; a program that writes only from other threads calls
  `abort_writes_on_sigterm()` once from its main thread;
- in a forked child (DataLoader workers) it aborts nothing: the writes are the parent's;
- RESERVOIR_WRITE_ABORT_ON_SIGTERM=0 leaves SIGTERM alone.
An `AsyncClient` on the program's own loop is not covered: blocking in a signal handler
would stop the very loop the abort needs; use `loop.add_signal_handler` and cancel.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING

from reservoir.common import logs

if TYPE_CHECKING:
    from .writer import WriteSession

log = logs.get_logger(__name__)

_lock = threading.Lock()
# Every write session of this process not yet published or aborted, with the loop it runs on.
_open: dict[int, tuple[WriteSession, asyncio.AbstractEventLoop]] = {}
_installed_in_pid = 0  # the process whose handler this is (0: none installed)


def watch(session: WriteSession, loop: asyncio.AbstractEventLoop) -> None:
    with _lock:
        _open[id(session)] = (session, loop)


def unwatch(session: WriteSession) -> None:
    with _lock:
        _open.pop(id(session), None)


def abort_writes_on_sigterm() -> bool:
    """Installs the SIGTERM handler if SIGTERM has its default disposition and this is
    the main thread; whether it is (now or already) installed."""
    global _installed_in_pid
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if current is not signal.SIG_DFL and current is not _on_sigterm:
        return False
    signal.signal(signal.SIGTERM, _on_sigterm)
    _installed_in_pid = os.getpid()
    return True


def _forget_the_parents_writes() -> None:
    # A forked child has a copy of the parent's open writes (not its own to abort) and
    # maybe of a lock some other thread held at the fork.
    global _lock, _installed_in_pid
    _lock = threading.Lock()
    _open.clear()
    _installed_in_pid = 0


os.register_at_fork(after_in_child=_forget_the_parents_writes)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if os.getpid() == _installed_in_pid:
        _abort_open_writes()
    signal.signal(signum, signal.SIG_DFL)
    # raise(3) sends it to this thread: delivered before the call returns, so the process
    # ends here, as killed by SIGTERM, without running anything else of the program.
    signal.raise_signal(signum)


def _abort_open_writes() -> None:
    # The lock is only ever held briefly by the client's loop thread; a bound keeps a
    # wedged one from holding up the exit.
    if not _lock.acquire(timeout=1.0):
        return
    try:
        sessions = list(_open.values())
    finally:
        _lock.release()
    if not sessions:
        return
    timeout_s = max(s.abort_on_signal_timeout_s for s, _ in sessions)
    deadline = time.monotonic() + timeout_s
    pending = []
    for session, loop in sessions:
        try:
            pending.append(asyncio.run_coroutine_threadsafe(session.abort(), loop))
        except RuntimeError:  # the client's loop is closed: the master's timeout does it
            continue
    for future in pending:
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
        except Exception as exc:  # the process ends either way; say what was left open
            log.warning("write_abort_on_sigterm_failed", error=repr(exc))
