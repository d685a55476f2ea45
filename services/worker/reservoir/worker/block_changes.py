"""The blocks this worker started or stopped holding since its last block report: what the
next incremental report tells the master."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .memory_tier import BlockId

if TYPE_CHECKING:
    from .tiered_store import TieredStore


class BlockChanges:
    def __init__(self) -> None:
        self._added: set[BlockId] = set()
        self._removed: set[BlockId] = set()

    def held(self, block: BlockId) -> None:
        self._removed.discard(block)
        self._added.add(block)

    def gone(self, block: BlockId) -> None:
        self._added.discard(block)
        self._removed.add(block)

    def take(self) -> tuple[list[BlockId], list[BlockId]]:
        """(added, removed) since the last `take`, sorted; forgotten here."""
        added, removed = sorted(self._added), sorted(self._removed)
        self._added, self._removed = set(), set()
        return added, removed

    def put_back(self, added: list[BlockId], removed: list[BlockId], still: TieredStore) -> None:
        """A report that did not reach the master is merged into the next one: of its
        additions, those `still` holds and not removed since; of its removals, those not
        added since."""
        for block in added:
            if block not in self._removed and block in still:
                self._added.add(block)
        for block in removed:
            if block not in self._added:
                self._removed.add(block)
