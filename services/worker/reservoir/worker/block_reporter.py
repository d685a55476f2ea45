"""Tells the master which blocks this worker holds: changes in batches, the whole content
when the master may have lost what it was told.

The master keeps the block-location table in memory and writes it to etcd in batches, so
a master that dies loses the reports it took since its last flush. The worker therefore
sends its whole content (a full report):

- at start and after re-registering (its lease was lost, so etcd dropped its entries);
- when a report reaches a master with a new epoch (a restarted master, or a standby
  that took over);
- when a report goes through after one failed (the master was unreachable, and may have
  been replaced meanwhile);
- every `full_report_interval_s`, to repair anything else.

An idle worker still calls the master every `master_check_interval_s` with an empty
report, so it notices a new master within that time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from reservoir.common import logs
from reservoir.common.config import WorkerConfig
from reservoir.common.errors import ReservoirError

from .master_link import MasterLink
from .service import WorkerService

log = logs.get_logger(__name__)


class BlockReporter:
    def __init__(self, config: WorkerConfig, service: WorkerService, master: MasterLink) -> None:
        self._config = config
        self._service = service
        self._master = master
        self._worker_id = config.worker_id
        self._needs_full = True
        self._last_full = 0.0
        self._last_call = 0.0
        self._epoch = ""
        self._failing = False
        # One report at a time: the loop's and a commit's (see `report`) never interleave.
        self._lock = asyncio.Lock()

    def request_full(self, reason: str) -> None:
        """The next report sends the whole content."""
        if not self._needs_full:
            log.info("full_block_report_requested", worker=self._worker_id, reason=reason)
        self._needs_full = True

    async def report(self) -> None:
        """One step of the report loop: a full report if one is due, else the changes.

        A master that cannot be reached is logged once, not at every step. Also called
        out of turn (a written file's blocks committed here), so the master knows where
        they are before the writer's close returns."""
        async with self._lock:
            with contextlib.suppress(ReservoirError):  # logged by _call, once
                await self._report()

    async def _report(self) -> None:
        now = time.monotonic()
        if now - self._last_full >= self._config.full_report_interval_s:
            self._needs_full = True
        if self._needs_full:
            await self._send_full()
            return
        added, removed = self._service.changes.take()
        if (
            not added
            and not removed
            and now - self._last_call < self._config.master_check_interval_s
            and not self._service.fetcher.budgets.wanting  # GETs wait for a first budget lease
        ):
            return
        try:
            epoch = await self._call(False, added, removed)
        except Exception:
            self._service.changes.put_back(added, removed, self._service.store)
            raise
        if epoch != self._epoch:
            self.request_full("new master epoch")
            await self._send_full()

    async def _send_full(self) -> None:
        self._service.changes.take()  # the whole content covers the pending changes
        blocks = self._service.store.blocks()
        epoch = await self._call(True, blocks, [])
        self._needs_full = False
        self._last_full = time.monotonic()
        if epoch != self._epoch:
            log.info("master_epoch_seen", worker=self._worker_id, epoch=epoch, previous=self._epoch)
        self._epoch = epoch
        log.debug("full_block_report_sent", worker=self._worker_id, blocks=len(blocks))

    async def _call(
        self, full: bool, added: list[tuple[str, int]], removed: list[tuple[str, int]]
    ) -> str:
        budgets = self._service.fetcher.budgets
        try:
            epoch, shares = await self._master.report(
                self._worker_id, full, added, removed, budgets.take_demands()
            )
        except Exception as exc:
            if not self._failing:
                self._failing = True
                log.warning(
                    "block_report_failed",
                    worker=self._worker_id,
                    error=str(exc),
                    error_type=type(exc).__name__,
                )
                self.request_full("report failed")
            raise
        self._last_call = time.monotonic()
        # A mount the master names no share for keeps its last one (a lapsed lease too).
        budgets.apply(shares)
        if self._failing:
            self._failing = False
            log.info("master_reachable_again", worker=self._worker_id)
        return epoch
