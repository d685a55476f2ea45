"""The cache rules as a worker knows them — pins and TTLs (see master/cache_rules.py) —
kept current by watching the metadata store, and the deadlines of blocks under a TTL.

A pinned block is known by its file id: the master writes one key per pinned file, so a
worker knows which of the blocks it finds on disk after a restart are pinned before it
serves anything. A TTL rule is matched by the under-store URI a block request carries,
so it also covers files that appear below its path later.

Until the first load the table is empty (nothing pinned, nothing expires); while the
watch is down it keeps what it last knew and sets the watch up again with backoff.
"""

from __future__ import annotations

import heapq

from reservoir.common import logs
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.key_watch import PrefixFollower
from reservoir.common.metadata.metadata_store import MetadataStore
from reservoir.common.models import CacheRule

from .memory_tier import BlockId

log = logs.get_logger(__name__)


class CacheRuleTable:
    def __init__(
        self, store: MetadataStore, backoff_s: float = 0.5, max_backoff_s: float = 10.0
    ) -> None:
        self._store = store
        self._follower = PrefixFollower(
            store,
            keyspace.CACHE,
            self,
            name="cache_rule",
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
        )
        self._rules: dict[str, CacheRule] = {}
        self._ttl_rules: list[CacheRule] = []  # deepest path first
        self._pinned: dict[str, set[str]] = {}  # file id -> the rules that pin it

    # ---- what the rules say ------------------------------------------------------------

    def pinned(self, block: BlockId) -> bool:
        """Whether `block` is pinned (Pins, for the tiers)."""
        return block[0] in self._pinned

    def ttl_s(self, mount_path: str, ufs_uri: str) -> float | None:
        """The TTL of an object (of the deepest rule that covers it), or None."""
        for rule in self._ttl_rules:
            if rule.mount_path == mount_path and rule.covers(ufs_uri):
                return rule.ttl_ms / 1000
        return None

    @property
    def pinned_files(self) -> int:
        return len(self._pinned)

    # ---- following the store -----------------------------------------------------------

    def _replace(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self._rules, self._pinned = {}, {}
        for key, value in pairs:
            self._apply(key, value, reindex=False)
        self._reindex()

    def _apply(self, key: bytes, value: bytes | None, *, reindex: bool = True) -> None:
        if key.startswith(keyspace.CACHE_RULES):
            path = key[len(keyspace.CACHE_RULES) :].decode()
            if value is None:
                self._rules.pop(path, None)
            else:
                self._rules[path] = CacheRule.from_json(value)
            if reindex:
                self._reindex()
        elif key.startswith(keyspace.PINNED):
            file_id, rule = keyspace.pinned_file_id(key), keyspace.pinned_rule_path(key)
            if value is not None:
                self._pinned.setdefault(file_id, set()).add(rule)
            elif file_id in self._pinned:
                self._pinned[file_id].discard(rule)
                if not self._pinned[file_id]:
                    del self._pinned[file_id]

    def _reindex(self) -> None:
        ttl = [r for r in self._rules.values() if r.ttl_ms > 0]
        self._ttl_rules = sorted(ttl, key=lambda r: len(r.ufs_prefix), reverse=True)
        log.info(
            "cache_rules_changed",
            rules=len(self._rules),
            ttl_rules=len(self._ttl_rules),
            pinned_files=len(self._pinned),
        )

    async def load(self) -> None:
        """Reads every rule and pinned file once (at start, before serving)."""
        self._replace(await self._store.get_prefix(keyspace.CACHE))

    # ---- PrefixMirror: the store's cache prefix ---------------------------------------

    def replace_all(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self._replace(pairs)

    def apply(self, key: bytes, value: bytes | None) -> None:
        self._apply(key, value)

    @property
    def following(self) -> bool:
        return self._follower.following

    async def follow(self) -> None:
        """Follows the rules for the life of the worker."""
        await self._follower.follow()


class BlockExpiry:
    """When each block under a TTL expires, soonest first (so a sweep costs what it
    finds, not what is held)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, BlockId, float]] = []
        self._deadlines: dict[BlockId, float] = {}

    def __len__(self) -> int:
        return len(self._deadlines)

    def set(self, block: BlockId, landed_s: float, ttl_s: float) -> None:
        deadline = landed_s + ttl_s
        if self._deadlines.get(block) == deadline:
            return
        self._deadlines[block] = deadline
        heapq.heappush(self._heap, (deadline, block, landed_s))

    def due(self, now_s: float) -> list[tuple[BlockId, float]]:
        """The blocks whose deadline has passed (forgotten here), with the landing time
        each deadline was counted from: the caller drops a block only if that is still
        the copy it holds."""
        found: list[tuple[BlockId, float]] = []
        while self._heap and self._heap[0][0] <= now_s:
            deadline, block, landed_s = heapq.heappop(self._heap)
            if self._deadlines.get(block) == deadline:  # else superseded
                del self._deadlines[block]
                found.append((block, landed_s))
        return found
