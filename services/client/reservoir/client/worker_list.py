"""The live workers as the master last listed them, kept for the read path: renewed in the
background once older than `workers_ttl_s`, so neither a slow nor a dead master ever holds
up a read that has workers to go to, with the placement of that list built once."""

from __future__ import annotations

import asyncio
import contextlib
import time

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.errors import ReservoirError
from reservoir.common.models import WorkerRecord
from reservoir.common.placement import Placement, placement_of
from reservoir.v1 import master_pb2

from .master_link import MasterLink

log = logs.get_logger(__name__)


class WorkerList:
    """The last worker list known, its age and its placement."""

    def __init__(self, config: cfg.ClientConfig, master: MasterLink) -> None:
        self._config = config
        self._master = master
        self._known: list[WorkerRecord] | None = None
        self._expires = 0.0
        self._placement: tuple[list[WorkerRecord], Placement] = ([], placement_of([]))
        self._refresh: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the list lives on

    async def fetch(self) -> list[WorkerRecord]:
        """The live workers, asked of the master now."""
        self._loop = asyncio.get_running_loop()
        request = master_pb2.ListWorkersRequest()
        response = await self._master.call("ListWorkers", request, "list workers")
        workers = [WorkerRecord.from_proto(w) for w in response.workers]
        # Built here, once per list (and by `placement` once per membership), so a block
        # read finds its homes with one hash.
        self._placement = (workers, placement_of(workers))
        self._known = workers
        self._expires = time.monotonic() + self._config.workers_ttl_s
        return workers

    async def last(self) -> list[WorkerRecord]:
        """The last list known (asked of the master when there is none yet), renewal
        started in the background once it is older than `workers_ttl_s`."""
        known = self._known
        if known is None:
            return await self.fetch()
        self._start_refresh()
        return known

    def known(self) -> list[WorkerRecord] | None:
        """The last list known, without a call, from any thread: None before the first.
        Once it is stale a renewal is started on the event loop, and the old list serves
        meanwhile."""
        known = self._known
        if known is None:
            return None
        loop = self._loop
        if self._expires <= time.monotonic() and self._refresh is None and loop:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(self._start_refresh)
        return known

    def placement(self, workers: list[WorkerRecord]) -> Placement:
        """The placement of `workers`: the one built with the last list fetched when they
        are that list (what `last` and `known` return), else built for them."""
        known, table = self._placement
        return table if workers is known else placement_of(workers)

    def expire(self) -> None:
        """The next read asks the master for news of the membership."""
        if self._known is not None:
            self._expires = 0.0

    def _start_refresh(self) -> None:
        if self._refresh is None and self._known is not None and self._expires <= time.monotonic():
            self._refresh = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        try:
            await self.fetch()
        except ReservoirError as exc:
            # Keep reading with the list we have; ask again after another interval.
            if self._known is not None:
                self._expires = time.monotonic() + self._config.workers_ttl_s
            log.debug("workers_refresh_failed", error=str(exc))
        finally:
            self._refresh = None
