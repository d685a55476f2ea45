"""Reservoir client SDK: `Client` (blocking) and `AsyncClient` (asyncio), and the types
their calls return."""

from reservoir.common.errors import ReservoirError
from reservoir.common.models import CacheRule, Inode, Mount, WorkerRecord

from .async_client import AsyncClient
from .cache_state import CacheReport, FreeResult, PinResult, TierStats, WorkerStats
from .client import Client, ReservoirFile
from .datasets import Dataset
from .load_jobs import JobState, LoadJob, MetadataLoadProgress
from .locality import HostBytes, Locality
from .reservoir_writer import ReservoirWriter
from .sigterm_aborts import abort_writes_on_sigterm
from .writer import WriteSession

__all__ = [
    "AsyncClient",
    "CacheReport",
    "CacheRule",
    "Client",
    "Dataset",
    "FreeResult",
    "HostBytes",
    "Inode",
    "JobState",
    "LoadJob",
    "Locality",
    "MetadataLoadProgress",
    "Mount",
    "PinResult",
    "ReservoirError",
    "ReservoirFile",
    "ReservoirWriter",
    "TierStats",
    "WorkerRecord",
    "WorkerStats",
    "WriteSession",
    "abort_writes_on_sigterm",
]
