"""Which blocks a tier keeps: eviction policies, apart from where the bytes live.

A tier (memory, shm, a disk directory) asks its policy three things: whether a block it
does not hold is worth making room for (`admit`, asked only when room must be made),
which held block should go next (`victims`, coldest first), and it tells the policy what
happened (`on_access` for every request that reaches the worker, held or not;
`on_admit`; `remove`). Sizes are in bytes; the tier does the byte accounting.

- `lru`: recency only; admits everything. Collapses on shuffled epochs: each epoch reads
  every block once in a new order, so the block LRU evicts is, on average, one the epoch
  is about to read (0.155 hits at a cache of half the data set, where any fixed half
  would give 0.5).
- `tinylfu` (the default): LRU order for victims, with TinyLFU admission (Einziger et al.,
  "TinyLFU: A Highly Efficient Cache Admission Policy"): a block that would displace a
  held one is admitted only if it was asked for more often, recently, than the block it
  would displace — not counting the request that brought it here, so ties go to the block
  already held. Frequencies come from a count-min sketch of 4-bit counters behind a
  doorkeeper (a Bloom filter that absorbs one-off reads), halved every ten cache-fulls
  of requests so that yesterday's hot set does not squat forever. On shuffled epochs the
  cache keeps a fixed subset (~0.5 hits at half the data set); a hot set that fits gets
  in after a couple of requests and stays; a one-off scan never displaces it. See
  bench/eviction_bench.py for the measured curves.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Protocol

from reservoir.common.errors import InvalidArgument

BlockId = tuple[str, int]  # (file_id, index)


class EvictionPolicy(Protocol):
    name: str

    def on_access(self, block: BlockId) -> None:
        """A request for `block` reached the worker (whether this tier holds it or not)."""

    def admit(self, block: BlockId, size: int) -> bool:
        """Whether `block`, not held, should be kept when keeping it means evicting."""

    def on_admit(self, block: BlockId, size: int) -> None:
        """`block` is now held."""

    def victims(self) -> Iterator[BlockId]:
        """Held blocks, the one to evict first first. The tier may skip some (pinned)."""

    def remove(self, block: BlockId) -> None:
        """`block` left the tier (evicted, dropped, freed)."""


class LruPolicy:
    """Least recently used out first; everything admitted."""

    name = "lru"

    def __init__(self) -> None:
        self._order: OrderedDict[BlockId, None] = OrderedDict()

    def on_access(self, block: BlockId) -> None:
        if block in self._order:
            self._order.move_to_end(block)

    def admit(self, block: BlockId, size: int) -> bool:
        return True

    def on_admit(self, block: BlockId, size: int) -> None:
        self._order[block] = None
        self._order.move_to_end(block)

    def victims(self) -> Iterator[BlockId]:
        return iter(self._order)

    def __contains__(self, block: BlockId) -> bool:
        return block in self._order

    def remove(self, block: BlockId) -> None:
        self._order.pop(block, None)


_HALVED = bytes(v >> 1 for v in range(256))


class FrequencySketch:
    """Approximate recent request counts: a doorkeeper Bloom filter, then a count-min
    sketch of 4-bit counters (saturating at 15), both halved/cleared every `window`
    requests. Fixed memory: 20 bytes per block it is sized for.
    """

    _DEPTH = 4
    _MAX = 15

    def __init__(self, blocks: int) -> None:
        # Four counters per block it is sized for: a cache is offered many more blocks than
        # it holds (twice as many at half a data set), and collisions between them are
        # what lets a block displace an equally popular one.
        self.blocks = blocks
        self.width = 1 << (max(16, 4 * blocks) - 1).bit_length()
        self._mask = self.width - 1
        self._rows = [bytearray(self.width) for _ in range(self._DEPTH)]
        # 32 bits per block: with 2 probes, ~1 % false positives at twice that many.
        self._door = bytearray(self.width)
        self._door_mask = 8 * self.width - 1
        self.window = 10 * blocks
        self._samples = 0

    def _slots(self, block: BlockId) -> tuple[int, int, int, int]:
        h = hash(block)
        # Four indexes from one 64-bit hash (Kirsch-Mitzenmacher double hashing).
        h1, h2, m = h & 0xFFFFFFFF, ((h >> 32) & 0xFFFFFFFF) | 1, self._mask
        return h1 & m, (h1 + h2) & m, (h1 + 2 * h2) & m, (h1 + 3 * h2) & m

    def _door_bits(self, block: BlockId) -> tuple[int, int]:
        h = hash((block, 0x9E3779B9))
        return h & self._door_mask, (h >> 32) & self._door_mask

    def _in_door(self, bits: tuple[int, int]) -> bool:
        a, b = bits
        door = self._door
        return bool(door[a >> 3] & (1 << (a & 7))) and bool(door[b >> 3] & (1 << (b & 7)))

    def increment(self, block: BlockId) -> None:
        bits = self._door_bits(block)
        if not self._in_door(bits):
            for b in bits:
                self._door[b >> 3] |= 1 << (b & 7)
        else:
            for row, s in zip(self._rows, self._slots(block), strict=True):
                if row[s] < self._MAX:
                    row[s] += 1
        self._samples += 1
        if self._samples >= self.window:
            self._age()

    def carry(self, block: BlockId, count: int) -> None:
        """Records `count` requests for `block` at once (moving counts to a new sketch)."""
        if count <= 0:
            return
        bits = self._door_bits(block)
        for b in bits:
            self._door[b >> 3] |= 1 << (b & 7)
        for row, s in zip(self._rows, self._slots(block), strict=True):
            row[s] = min(self._MAX, row[s] + count - 1)

    def frequency(self, block: BlockId) -> int:
        slots = self._slots(block)
        counted = min(row[s] for row, s in zip(self._rows, slots, strict=True))
        return counted + (1 if self._in_door(self._door_bits(block)) else 0)

    def _age(self) -> None:
        for row in self._rows:
            row[:] = row.translate(_HALVED)
        self._door[:] = bytes(len(self._door))
        self._samples //= 2


class TinyLfuPolicy:
    """LRU victims behind TinyLFU admission (see the module docstring)."""

    name = "tinylfu"

    def __init__(self, expected_blocks: int) -> None:
        self._lru = LruPolicy()
        self._sketch = FrequencySketch(expected_blocks)
        self._held = 0

    def on_access(self, block: BlockId) -> None:
        self._sketch.increment(block)
        self._lru.on_access(block)

    def admit(self, block: BlockId, size: int) -> bool:
        victim = next(self._lru.victims(), None)
        if victim is None:
            return True
        # The request that brought `block` here is already counted: discount it, so a
        # block only as popular as the one it would displace stays out.
        return self._sketch.frequency(block) - 1 > self._sketch.frequency(victim)

    def on_admit(self, block: BlockId, size: int) -> None:
        self._lru.on_admit(block, size)
        self._held += 1
        if self._held > self._sketch.blocks:
            # More blocks held than the sketch was sized for (smaller blocks than
            # expected): a wider sketch keeps collisions rare. The held blocks keep their
            # counts; the others start afresh, which favours what is held.
            old, self._sketch = self._sketch, FrequencySketch(2 * self._held)
            for held in self._lru.victims():
                self._sketch.carry(held, old.frequency(held))

    def victims(self) -> Iterator[BlockId]:
        return self._lru.victims()

    def remove(self, block: BlockId) -> None:
        if block in self._lru:
            self._held -= 1
        self._lru.remove(block)


POLICIES = ("tinylfu", "lru")
DEFAULT_POLICY = "tinylfu"
# Used to size a sketch before any block is seen: the capacity over a typical block.
_TYPICAL_BLOCK = 1 << 20


def new_policy(name: str, capacity_bytes: int) -> EvictionPolicy:
    """The policy called `name` for a tier of `capacity_bytes`."""
    if name == "lru":
        return LruPolicy()
    if name == "tinylfu":
        return TinyLfuPolicy(max(1024, capacity_bytes // _TYPICAL_BLOCK))
    raise InvalidArgument(f"unknown eviction policy {name!r} (one of {', '.join(POLICIES)})")
