"""The memory tier: immutable blocks within a byte capacity; an eviction policy (see
eviction.py) decides which are kept, pins (see cache_rules.py) which may never go."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from reservoir.common.errors import DataLoss

from .block_landing import BlockLanding, BytesLanding
from .eviction import EvictionPolicy, LruPolicy

BlockId = tuple[str, int]  # (file_id, index); the file_id pins the block size too
BlockData = bytes  # what a tier hands out: immutable block bytes, private to this process


@dataclass(frozen=True, slots=True)
class BlockFileRef:
    """A held block's bytes in a file: `length` bytes at `offset` of `path`, with the
    checksum taken when the block landed (the reader's end-to-end check)."""

    path: str
    offset: int
    length: int
    crc: int


@dataclass(slots=True)
class HeldBlock:
    length: int
    crc: int  # CRC32C taken when the block landed
    offset: int  # of the block in its object
    held: Any  # what the tier keeps for the bytes (see `_keep`)
    landed_s: float = 0.0  # wall-clock time the block landed in the worker (for TTLs)


class LowerTier(Protocol):
    """Where a block evicted from this tier may go instead of away (the disk tiers)."""

    def holds(self, block: BlockId) -> bool: ...

    def spill(
        self, block: BlockId, data: bytes, crc: int, offset: int, landed_s: float
    ) -> None: ...


class Pins(Protocol):
    """Which blocks are pinned (the worker's cache rules): never evicted."""

    def pinned(self, block: BlockId) -> bool: ...


class NoPins:
    def pinned(self, block: BlockId) -> bool:
        return False


NO_PINS: Pins = NoPins()


class VictimOrder(Protocol):
    """Which held blocks go first across mounts (the worker's mount shares)."""

    def favoured(self, block: BlockId) -> bool:
        """Keep `block` even when the policy would turn it down."""

    def order(self, arriving: BlockId, victims: Iterator[BlockId]) -> Iterator[BlockId]:
        """`victims` (the policy's order), regrouped, to make room for `arriving`."""


class PolicyOrder:
    """The policy's order as it is: no mount told apart."""

    def favoured(self, block: BlockId) -> bool:
        return False

    def order(self, arriving: BlockId, victims: Iterator[BlockId]) -> Iterator[BlockId]:
        return victims


POLICY_ORDER: VictimOrder = PolicyOrder()


class MemoryTier:
    """Blocks within a byte capacity, kept and evicted as `policy` says (LRU when none is
    given). Subclasses change where a block's bytes live by overriding `_keep`, `_load`
    and `_release`; the accounting stays here.

    A block is kept as the bytes it arrived in. The worker's allocator tuning (see
    common/malloc_tuning.py) gives every allocation of 256 KiB or more a mapping of its
    own, so a large block's memory goes back to the system the moment it is evicted (and
    the last reader lets go of it), and small ones share the heap instead of costing a
    mapping each (the kernel allows a process ~65k mappings).
    """

    name = "mem"

    def __init__(
        self,
        capacity_bytes: int,
        on_evict: Callable[[BlockId, int], None] | None,
        policy: EvictionPolicy | None = None,
    ) -> None:
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self.evictions = 0
        self.hits = 0
        self.policy: EvictionPolicy = policy or LruPolicy()
        self._blocks: dict[BlockId, HeldBlock] = {}
        self.on_evict = on_evict
        self.below: LowerTier | None = None
        self.pins: Pins = NO_PINS
        self.order: VictimOrder = POLICY_ORDER
        # Blocks being received into this tier's own memory (`landing`).
        self._landings: dict[BlockId, BlockLanding] = {}

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: BlockId) -> bool:
        return block in self._blocks

    def get(self, block: BlockId) -> tuple[BlockData, int] | None:
        """The block's bytes and checksum, or None when it is not held.

        Raises DataLoss when bytes read back fail their checksum (the caller drops them).
        """
        self.policy.on_access(block)
        return self.peek(block)

    def peek(self, block: BlockId) -> tuple[BlockData, int] | None:
        """`get` without counting a request (the caller already did, see `record`)."""
        entry = self._blocks.get(block)
        if entry is None:
            return None
        data = self._load(block, entry)
        self.hits += 1
        return data, entry.crc

    def file_of(self, block: BlockId) -> BlockFileRef | None:
        """Where the block's bytes lie in a file, for a reader that sends them without
        loading them (counted as a `get`); None when this tier keeps no files or does not
        hold the block."""
        return None

    @contextlib.contextmanager
    def landing(self, block: BlockId, length: int) -> Iterator[BlockLanding]:
        """Memory for a block about to be fetched, `length` bytes, to receive it into:
        what this tier keeps for it when `put` is then given the landing's `data()` (no
        copy). Whatever was not kept is let go when the block leaves the context."""
        landing = self._new_landing(block, length)
        self._landings[block] = landing
        try:
            yield landing
        finally:
            if self._landings.get(block) is landing:
                del self._landings[block]
            landing.close()

    def _new_landing(self, block: BlockId, length: int) -> BlockLanding:
        return BytesLanding(length)

    def read_directly(self, block: BlockId) -> bool:
        """Whether a process read the block's file since the last time this was asked
        (a short-circuit reader the worker never hears from); False for a tier that
        keeps no files."""
        return False

    def record(self, block: BlockId) -> None:
        """A request for `block` reached the worker (served by this tier or not)."""
        self.policy.on_access(block)

    def put(
        self,
        block: BlockId,
        data: bytes | memoryview,
        crc: int,
        offset: int,
        landed_s: float | None = None,
    ) -> bool:
        """Keeps `data` if the policy admits it (a pinned block always is), evicting what
        it says to make room. `landed_s`: when the block first landed in the worker (now
        when not given).

        Returns False (and keeps nothing) when the policy turns the block down, the
        block alone exceeds the capacity, or no room can be made (pinned blocks): the
        read is still served, just not cached.
        """
        if block in self._blocks:
            return True
        size = len(data)
        if size > self.capacity_bytes:
            return False
        need = self.used_bytes + size - self.capacity_bytes
        if need > 0:
            if (
                not self.pins.pinned(block)
                and not self.order.favoured(block)
                and not self.policy.admit(block, size)
            ):
                return False
            victims = self._victims(block, need)
            if victims is None:
                return False
            for victim in victims:
                self._evict(victim)
        held = self._keep(block, data, crc, offset)
        landed = time.time() if landed_s is None else landed_s
        self._blocks[block] = HeldBlock(size, crc, offset, held, landed)
        self.used_bytes += size
        self.policy.on_admit(block, size)
        return True

    def _victims(self, arriving: BlockId, need: int) -> list[BlockId] | None:
        """Blocks to evict to free `need` bytes for `arriving`, or None if that cannot be
        done. A pinned block may leave only when a lower tier holds it (it stays in the
        worker). The order may name blocks this tier does not hold (held below only)."""
        chosen: list[BlockId] = []
        freed = 0
        below = self.below
        for victim in self.order.order(arriving, self.policy.victims()):
            entry = self._blocks.get(victim)
            if entry is None:
                continue
            if self.pins.pinned(victim) and (below is None or not below.holds(victim)):
                continue
            chosen.append(victim)
            freed += entry.length
            if freed >= need:
                return chosen
        return None

    def _evict(self, block: BlockId) -> None:
        entry = self._blocks[block]
        if self.below is not None and not self.below.holds(block):
            try:
                data = self._load(block, entry)
            except DataLoss:  # bytes that fail their check are not worth keeping
                data = None
            if data is not None:
                self.below.spill(block, data, entry.crc, entry.offset, entry.landed_s)
        self._forget(block)
        self.evictions += 1
        if self.on_evict is not None:
            self.on_evict(block, entry.length)

    def _forget(self, block: BlockId) -> HeldBlock | None:
        entry = self._blocks.pop(block, None)
        if entry is None:
            return None
        self.used_bytes -= entry.length
        self.policy.remove(block)
        self._release(block)
        return entry

    def entry(self, block: BlockId) -> HeldBlock | None:
        return self._blocks.get(block)

    def pinned_bytes(self) -> int:
        pins = self.pins
        return sum(e.length for b, e in self._blocks.items() if pins.pinned(b))

    def drop(self, block: BlockId) -> bool:
        """Forgets a block (e.g. its bytes failed their checksum); False if not held."""
        return self._forget(block) is not None

    def drop_entry(self, block: BlockId) -> HeldBlock | None:
        """`drop`, returning what was held."""
        return self._forget(block)

    def rekey(self, old: BlockId, new: BlockId, offset: int) -> bool:
        """Holds `old`'s bytes as block `new` (at `offset` of its object) without copying
        them: a written block staged under its write's id, kept under its file's once the
        file is published. False when `old` is not held or `new` already is (then
        nothing changes)."""
        if new in self._blocks or old not in self._blocks:
            return False
        try:
            held = self._rekey(old, new, self._blocks[old], offset)
        except OSError:
            return False
        entry = self._blocks.pop(old)
        self.policy.remove(old)
        self._blocks[new] = HeldBlock(entry.length, entry.crc, offset, held, time.time())
        self.policy.on_admit(new, entry.length)
        return True

    def _rekey(self, old: BlockId, new: BlockId, entry: HeldBlock, offset: int) -> Any:
        """What `_keep` would have stored for `new`, made from what it stored for `old`
        (which is then gone)."""
        return entry.held

    def _keep(self, block: BlockId, data: bytes | memoryview, crc: int, offset: int) -> Any:
        """Stores a block's bytes; returns what `_load` gets back to find them."""
        # A view (a staged block, into its request) is copied: a tier hands out bytes.
        return data if isinstance(data, bytes) else bytes(data)

    def _load(self, block: BlockId, entry: HeldBlock) -> BlockData:
        """The bytes `_keep` stored."""
        return entry.held  # type: ignore[no-any-return]

    def _release(self, block: BlockId) -> None:
        """Frees what `_keep` stored for a block that leaves the tier."""

    def blocks(self) -> list[BlockId]:
        return list(self._blocks)
