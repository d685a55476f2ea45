"""A worker told to stop (SIGTERM: a node drain, a pod deleted, a scale-in) drains itself
first, within a bound, so the cluster keeps what it cached: the master copies its blocks to
their next homes while it serves, and it exits when that is done or the time is up."""

from __future__ import annotations

import asyncio
import time

from reservoir.common import logs
from reservoir.common.errors import ReservoirError

from .master_link import MasterLink

log = logs.get_logger(__name__)

_POLL_S = 0.25
_ENDED = ("completed", "failed", "cancelled")


async def drain_before_leaving(link: MasterLink, worker_id: str, timeout_s: float) -> str:
    """Drains this worker for up to `timeout_s`; returns how the drain ended ("completed",
    "failed", "cancelled", "timeout", or "refused" when the master would not drain it:
    no other serving worker, or no master)."""
    if timeout_s <= 0:
        return "off"
    deadline = time.monotonic() + timeout_s
    try:
        job_id = await asyncio.wait_for(link.drain(worker_id), timeout_s)
    except (ReservoirError, TimeoutError) as exc:
        log.warning("worker_drain_refused", worker=worker_id, error=str(exc))
        return "refused"
    log.info("worker_draining", worker=worker_id, job=job_id, timeout_s=timeout_s)
    while time.monotonic() < deadline:
        try:
            state = await link.job_state(job_id)
        except ReservoirError as exc:
            log.warning("worker_drain_unknown", worker=worker_id, error=str(exc))
            state = "running"
        if state in _ENDED:
            log.info("worker_drained", worker=worker_id, job=job_id, state=state)
            return state
        await asyncio.sleep(_POLL_S)
    log.warning("worker_drain_timeout", worker=worker_id, job=job_id, timeout_s=timeout_s)
    return "timeout"
