"""Reservoir client SDK: `Client` (blocking) and `AsyncClient` (asyncio)."""

from reservoir.common.errors import ReservoirError

from .async_client import AsyncClient
from .client import Client, ReservoirFile

__all__ = ["AsyncClient", "Client", "ReservoirError", "ReservoirFile"]
