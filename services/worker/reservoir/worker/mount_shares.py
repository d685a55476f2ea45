"""Each mount's part of one worker's cache: its quota share, fair eviction, last reads.

A mount's `quota_bytes` caps the whole cluster. Blocks land on their homes, which are
spread over the workers by capacity, so each worker keeps within the same capacity-weighted
share of the quota: `quota × own capacity / cluster capacity`. The weight is a pure
function of the worker registry in etcd (what placement already reads), refreshed every
few seconds (share_weight.py); a worker that cannot read etcd keeps the weight it last
had, so the master (or etcd) being down costs nothing. Until a weight is known a mount
with a quota keeps nothing here: a read is served, not cached. Overshoot is at most one
block per worker: a block is kept only after its mount's own blocks made room for it.

Under pressure a tier evicts fairly (fair_eviction.py), from what is counted here.

A block's mount is known from the request that brought it (requests carry the mount
path); the map holds only what the worker holds, so it is bounded by the cache. Blocks
found on disk at start, before any request names their mount, count as no mount's.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Protocol

from reservoir.common import logs
from reservoir.common.models import Mount, MountOptions

from .memory_tier import BlockId, Pins

log = logs.get_logger(__name__)

NO_MOUNT = ""  # the mount of a block no request has named yet


class BlockHolder(Protocol):
    """Where blocks are kept (the worker's tiered store)."""

    def put(self, block: BlockId, data: bytes | memoryview, crc: int, offset: int) -> bool: ...

    def evict(self, blocks: list[BlockId]) -> list[tuple[BlockId, int]]: ...

    def read_directly(self, block: BlockId) -> bool: ...


class MountShares:
    def __init__(self, pins: Pins) -> None:
        self._pins = pins
        self._weight: float | None = None
        # Moves with every change of what is held, the options or the weight (what fair
        # eviction's classes depend on).
        self.version = 0
        self._active = self._quotas = False
        self._options: dict[str, MountOptions] = {}
        self._created_s: dict[str, float] = {}
        self._mount_of: dict[BlockId, str] = {}
        self._sizes: dict[BlockId, int] = {}
        # Per mount, its held blocks least recently used first (whose go first).
        self._held: dict[str, OrderedDict[BlockId, None]] = {}
        self._bytes: dict[str, int] = {}
        self._last_read_s: dict[str, float] = {}

    @property
    def weight(self) -> float | None:
        """This worker's fraction of the cluster's capacity; None until first known."""
        return self._weight

    @weight.setter
    def weight(self, weight: float | None) -> None:
        self._weight = weight
        self.version += 1

    # ---- MountListener: the mount table's changes ---------------------------------------

    def mount_changed(self, mount: Mount) -> None:
        self._options[mount.path] = mount.options
        self._created_s[mount.path] = mount.created_ms / 1000
        self._options_changed()

    def mount_removed(self, mount_path: str) -> None:
        self._options.pop(mount_path, None)
        self._created_s.pop(mount_path, None)
        self._options_changed()

    # ---- what is held ------------------------------------------------------------------

    def expect(self, block: BlockId, mount_path: str) -> None:
        """`block` of `mount_path` is about to be offered to the tiers."""
        if block not in self._sizes:
            self._mount_of[block] = mount_path

    def adopt(self, block: BlockId, mount_path: str, size: int) -> None:
        """A held block a request names: counted with its mount, if it was no mount's
        yet (found on disk at start, kept before its mount was known)."""
        if block not in self._sizes:
            self._mount_of[block] = mount_path
            self.held(block, size)
        elif self._mount_of[block] == NO_MOUNT and mount_path != NO_MOUNT:
            self.gone(block)
            self._mount_of[block] = mount_path
            self.held(block, size)

    def held(self, block: BlockId, size: int) -> None:
        """`block` (see `expect`) is now held by a tier."""
        if block in self._sizes:
            return
        self.version += 1
        mount = self._mount_of.setdefault(block, NO_MOUNT)
        self._sizes[block] = size
        self._held.setdefault(mount, OrderedDict())[block] = None
        self._bytes[mount] = self._bytes.get(mount, 0) + size

    def gone(self, block: BlockId) -> None:
        """No tier holds `block` any more (or it was expected and not kept)."""
        mount = self._mount_of.pop(block, None)
        size = self._sizes.pop(block, None)
        if mount is None or size is None:
            return
        self.version += 1
        self._bytes[mount] -= size
        blocks = self._held[mount]
        blocks.pop(block, None)
        if not blocks:
            del self._held[mount], self._bytes[mount]

    def bytes_of(self, mount_path: str) -> int:
        return self._bytes.get(mount_path, 0)

    def blocks_of(self, mount_path: str) -> list[BlockId]:
        return list(self._held.get(mount_path, ()))

    def mount_of(self, block: BlockId) -> str:
        return self._mount_of.get(block, NO_MOUNT)

    # ---- reads -------------------------------------------------------------------------

    def read(self, block: BlockId, mount_path: str, now_s: float | None = None) -> None:
        """A reader asked for `block` of `mount_path` (a load is not a read)."""
        self._last_read_s[mount_path] = time.time() if now_s is None else now_s
        mount = self._mount_of.get(block)
        if mount is not None and block in self._sizes:
            self._held[mount].move_to_end(block)

    def read_at(self, mount_path: str, now_s: float) -> None:
        """The mount was read by `now_s` (seen some other way than a request)."""
        self._last_read_s[mount_path] = max(self._last_read_s.get(mount_path, 0.0), now_s)

    def last_read_s(self, mount_path: str) -> float:
        """When a reader last asked this worker for the mount, else when it was made."""
        return max(self._last_read_s.get(mount_path, 0.0), self._created_s.get(mount_path, 0.0))

    def idle_ttl_s(self) -> dict[str, float]:
        """The mounts with an idle TTL, and it."""
        return {p: o.idle_ttl_ms / 1000 for p, o in self._options.items() if o.idle_ttl_ms}

    # ---- quota: admission --------------------------------------------------------------

    def share(self, mount_path: str) -> int | None:
        """The bytes of `mount_path` this worker may hold; None: no cap of its own."""
        options = self._options.get(mount_path)
        if options is None or not options.quota_bytes:
            return None
        if self.weight is None:
            return 0
        return int(options.quota_bytes * self.weight)

    def make_room(self, mount_path: str, block: BlockId, size: int) -> list[BlockId] | None:
        """The mount's own blocks to evict before `block` (`size` bytes) is kept within
        the mount's share (coldest first, pinned ones never); None: it is not kept. A
        pinned block is kept whatever room is made: a pin is the operator's word."""
        share = self.share(mount_path)
        if share is None:
            return []
        need = self.bytes_of(mount_path) + size - share
        if need <= 0:
            return []
        chosen: list[BlockId] = []
        for own in self._held.get(mount_path, ()):
            if self._pins.pinned(own):
                continue
            chosen.append(own)
            need -= self._sizes[own]
            if need <= 0:
                return chosen
        return chosen if self._pins.pinned(block) else None

    def full(self, mount_path: str, size: int) -> bool:
        """A block of `size` bytes more would put the mount over its share here."""
        share = self.share(mount_path)
        return share is not None and self.bytes_of(mount_path) + size > share

    def keep(
        self,
        holder: BlockHolder,
        mount_path: str,
        block: BlockId,
        data: bytes | memoryview,
        crc: int,
        offset: int,
    ) -> bool:
        """Offers a fetched block to `holder` once its mount's own blocks made room for it
        within the mount's share; True if kept (a block not kept is still served)."""
        if block in self._sizes:
            return True
        room = self.make_room(mount_path, block, len(data))
        if room is None:
            log.debug("block_over_quota", mount=mount_path, file_id=block[0], index=block[1])
            return False
        if room:
            holder.evict(room)
        self.expect(block, mount_path)
        if holder.put(block, data, crc, offset):
            self.held(block, len(data))
            return True
        self.gone(block)
        return False

    # ---- what fair eviction reads (fair_eviction.py) ------------------------------------

    @property
    def active(self) -> bool:
        """Some mount has a quota or a priority other than normal: eviction is fair."""
        return self._active

    @property
    def quotas(self) -> bool:
        """Some mount has a quota."""
        return self._quotas

    def _options_changed(self) -> None:
        self.version += 1
        self._quotas = any(o.quota_bytes for o in self._options.values())
        self._active = self._quotas or any(o.priority_rank != 1 for o in self._options.values())

    def held_bytes(self) -> dict[str, int]:
        """Each mount's bytes held here (a copy)."""
        return dict(self._bytes)

    def counted(self, block: BlockId) -> bool:
        """Whether `block` is counted with a mount here."""
        return block in self._sizes

    def priority_rank(self, mount_path: str) -> int:
        options = self._options.get(mount_path)
        return options.priority_rank if options is not None else 1

    def coldest(self, mount_path: str) -> Iterator[BlockId]:
        """The mount's blocks, least recently read first (not to be changed meanwhile)."""
        return iter(self._held.get(mount_path, ()))

    # ---- quota: trimming after a change ------------------------------------------------

    def excess(self) -> list[BlockId]:
        """Blocks over their mount's share (a quota lowered, a weight shrunk by a worker
        that joined), coldest first, pinned ones never: what to evict now. Nothing while
        the weight is unknown (a restart with etcd away must not empty the cache)."""
        chosen: list[BlockId] = []
        if self.weight is None:
            return chosen
        for mount, held in self._bytes.items():
            share = self.share(mount)
            if share is None or held <= share:
                continue
            over = held - share
            for block in self._held[mount]:
                if over <= 0:
                    break
                if not self._pins.pinned(block):
                    chosen.append(block)
                    over -= self._sizes[block]
        return chosen
