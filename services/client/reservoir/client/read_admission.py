"""The admission seam of the client's read path: asked before the client reads a block
from the under-store itself (the last route of `BlockReader`, `under_store_blocks.py`), so
a mount's under-store budget applies to direct reads without an edit of any route.

A client holds no lease from the master (it may be reading directly because the cluster
is down); it takes what one worker would hold on an even split of the mount's limits
among the workers it knows. Each client is bounded so; many clients reading directly at
once are not bounded together (a last resort, not the cluster's way to read).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from reservoir.common.config import UnderStoreCalls
from reservoir.common.models import Mount
from reservoir.common.understore.budget_gate import BudgetShare
from reservoir.common.understore.store_budgets import StoreBudgets

from .cluster_view import ClusterView


class ReadAdmission(Protocol):
    def admitted(self, mount: Mount, length: int) -> AbstractAsyncContextManager[None]:
        """Holds one direct GET of `length` bytes of `mount`'s store while it runs."""
        ...


class MountBudgetAdmission:
    """Direct GETs of a budgeted mount within an even worker's share of its limits."""

    def __init__(self, view: ClusterView, calls: UnderStoreCalls) -> None:
        self._view = view
        self._budgets = StoreBudgets(calls)

    @contextlib.asynccontextmanager
    async def admitted(self, mount: Mount, length: int) -> AsyncIterator[None]:
        if not mount.options.budgeted:
            yield
            return
        workers = await self._view.workers(fresh=False)
        gate = self._budgets.gate(mount.path)
        gate.set_share(BudgetShare.even(mount.options, len(workers)))
        async with gate.admitted_get(length):
            yield
