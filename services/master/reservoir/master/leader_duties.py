"""What only the leading master does, started when it wins and stopped when it loses."""

from __future__ import annotations

import asyncio

from reservoir.common.config import MasterConfig
from reservoir.common.serving import servers

from .service import MasterService


class LeaderDuties:
    """The state loaded from etcd, the load jobs resumed, and the periodic work: block
    locations flushed to etcd, the live workers refreshed, the mounts kept fresh (their
    interval syncs run, their S3 event queues followed), declared datasets reconciled."""

    def __init__(self, service: MasterService, config: MasterConfig) -> None:
        self._service = service
        self._config = config
        self._loops: list[asyncio.Task[None]] = []

    async def lead(self) -> None:
        await self._service.start()
        config, service = self._config, self._service
        self._loops = [
            asyncio.create_task(
                servers.every(
                    config.location_flush_interval_s, "location_flush", service.flush_locations
                )
            ),
            asyncio.create_task(
                servers.every(
                    config.worker_refresh_interval_s, "worker_refresh", service.refresh_workers
                )
            ),
            asyncio.create_task(
                servers.every(config.sync_tick_s, "interval_sync", service.interval_sync.tick)
            ),
            asyncio.create_task(
                servers.every(config.sync_tick_s, "events_follow", service.event_followers.tick)
            ),
            asyncio.create_task(
                servers.every(
                    config.dataset_reconcile_interval_s,
                    "dataset_reconcile",
                    service.reconciler.pass_once,
                )
            ),
        ]

    async def stand_down(self) -> None:
        loops, self._loops = self._loops, []
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await self._service.stand_down()
