"""Fair eviction across mounts: which held blocks a tier evicts first (VictimOrder).

First the blocks of mounts over their share on this worker (see mount_shares.py; a mount
without a quota shares what the quotas leave of the worker's capacity equally with the
other such mounts holding blocks here), then the others; within each, low priority before
normal before high, each mount's least recently read first; then what no mount claims,
in the tier policy's order. So a scan of one mount cannot push another below its share,
and a block of a mount under its share gets in past the policy's admission while some
mount is over its own (the over-share mount pays).
"""

from __future__ import annotations

from collections.abc import Iterator

from .memory_tier import BlockId
from .mount_shares import MountShares

_OVER, _UNDER = 0, 1
Classes = dict[str, tuple[int, int]]  # mount -> (over its share or not, priority rank)


class FairEviction:
    def __init__(self, shares: MountShares, capacity_bytes: int) -> None:
        """`capacity_bytes`: what the worker holds in all its tiers (what the mounts
        without a quota share)."""
        self._shares = shares
        self._capacity = capacity_bytes
        # The classes last worked out, for the block and the state they were worked out
        # for: a tier asks `favoured` and then `order` for the same arriving block.
        self._memo: tuple[BlockId, int, Classes] | None = None

    def _classes(self, arriving: BlockId) -> Classes:
        """Each mount holding blocks here, the `arriving` block counted with its own."""
        shares = self._shares
        memo = self._memo
        if memo is not None and memo[0] == arriving and memo[1] == shares.version:
            return memo[2]
        held = shares.held_bytes()
        if not shares.counted(arriving):
            incoming = shares.mount_of(arriving)
            held[incoming] = held.get(incoming, 0) + 1  # a byte more tips a full mount over
        limits = {m: shares.share(m) for m in held}
        reserved = sum(min(s, self._capacity) for s in limits.values() if s is not None)
        open_mounts = [m for m, s in limits.items() if s is None]
        open_share = max(0, self._capacity - reserved) // max(1, len(open_mounts))
        classes = {
            mount: (
                _OVER if held[mount] > (open_share if limit is None else limit) else _UNDER,
                shares.priority_rank(mount),
            )
            for mount, limit in limits.items()
        }
        self._memo = (arriving, shares.version, classes)
        return classes

    def favoured(self, block: BlockId) -> bool:
        """A block of a mount under its share, while some mount is over its own: kept
        whatever the tier's admission policy says."""
        if not self._shares.active:
            return False
        classes = self._classes(block)
        return classes[self._shares.mount_of(block)][0] == _UNDER and any(
            c[0] == _OVER for c in classes.values()
        )

    def order(self, arriving: BlockId, victims: Iterator[BlockId]) -> Iterator[BlockId]:
        """The blocks to evict first first, to make room for `arriving` (see the module
        docstring). Lazy, and each mount's list is its own, so finding the first victim
        costs what is skipped of that mount, not a walk over every block held. The tier
        skips what it does not hold."""
        shares = self._shares
        if not shares.active:
            yield from victims
            return
        classes = self._classes(arriving)
        for _, mount in sorted((c, m) for m, c in classes.items()):
            yield from shares.coldest(mount)
        for block in victims:
            if not shares.counted(block):
                yield block
