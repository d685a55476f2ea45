"""How a directory's chunks change: one write's upserts and deletes applied to the
chunks they fall in, each chunk rewritten, split when it grew past `chunk_entries`
entries or `chunk_bytes` bytes (common/metadata/inode_codec.py), and the files and
directories it added or removed counted (namespace_counts.py). `NamespaceStore` decides
which directory a change is in and holds its lock; this is the rewrite itself."""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

from reservoir.common.metadata import keyspace
from reservoir.common.metadata.inode_codec import (
    ChunkPlace,
    RawEntry,
    encode_chunk,
    is_dir_entry,
    iter_chunk,
)
from reservoir.common.metadata.metadata_store import MetadataStore, prefix_end

from .namespace_counts import NamespaceCounts

CHUNK_ENTRIES = 128
# And at most about this many bytes: etcd's bbolt keeps at least two values per node, so a
# value of a bit under one 4 KiB page packs two pages full, and one a bit over wastes a
# third of three (measured: 38 against 49 bytes per file).
CHUNK_BYTES = 3800
# A chunk's version byte, base time and entry count, at most.
_CHUNK_HEADER = 16


@dataclass
class DirectoryChanges:
    """What one write does to one directory group."""

    place: ChunkPlace
    upserts: dict[str, RawEntry] = field(default_factory=dict)
    deletes: set[str] = field(default_factory=set)


class ChunkWriter:
    def __init__(
        self,
        store: MetadataStore,
        counts: NamespaceCounts,
        chunk_entries: int,
        chunk_bytes: int,
        page_chunks: int,
    ) -> None:
        self._store = store
        self._counts = counts
        # Entries per chunk at most: a stat reads one chunk, a change rewrites one.
        self.chunk_entries = chunk_entries
        self.chunk_bytes = chunk_bytes
        self._page_chunks = page_chunks

    async def rewrite(self, group: bytes, change: DirectoryChanges) -> None:
        """Applies `change` to the directory `group`: reads the chunks its names fall in
        (one read each, or the whole directory when it names more than a chunk holds),
        writes each touched chunk back (split when it outgrew a chunk; the new chunks
        before anything is deleted) and counts what the write added or removed. The
        caller holds the group's lock."""
        names = sorted(change.upserts.keys() | change.deletes)
        end = prefix_end(group)
        loaded: dict[bytes, bytes] = {}
        if len(names) > self.chunk_entries:
            # Many names: reading the whole directory costs less than a read each.
            async for page in self._store.scan_prefix(group, self._page_chunks):
                loaded.update(page)
        else:
            found = await self._store.first_in_ranges([(group + n.encode(), end) for n in names])
            loaded.update(f for f in found if f is not None)
        keys = sorted(loaded)
        chunks: dict[bytes, dict[str, RawEntry]] = {}
        touched: set[bytes] = set()
        counted = [0, 0]  # files, directories this write adds (or removes)
        for name in names:
            key = _first_at_or_after(keys, group + name.encode())
            if key is None:
                key = keyspace.chunk_key(group, None)  # after every chunk: a new last one
            if key not in chunks:
                raw = loaded.get(key)
                chunks[key] = {e.name: e for e in iter_chunk(raw)} if raw else {}
            entries = chunks[key]
            old = entries.pop(name, None)
            if name in change.deletes:
                if old is None:
                    continue
            else:
                new = entries[name] = change.upserts[name]
                counted[is_dir_entry(new)] += 1
            if old is not None:
                counted[is_dir_entry(old)] -= 1
            touched.add(key)
        puts: list[tuple[bytes, bytes]] = []
        removed: list[bytes] = []
        for key in sorted(touched):
            entries = chunks[key]
            if not entries:
                removed.append(key)
                continue
            ordered = [entries[n] for n in sorted(entries)]
            pieces = self.pieces(ordered, change.place)
            for number, (piece, encoded) in enumerate(pieces):
                # The last piece keeps the chunk's key (its range ends there); the
                # others end at their own last name.
                last = number == len(pieces) - 1
                piece_key = key if last else keyspace.chunk_key(group, piece[-1].name)
                puts.append((piece_key, encoded))
        if puts:
            await self._store.put_many(puts)
        if removed:
            await self._store.delete_many(removed)
        self._counts.add(group, *counted)

    def pieces(
        self, ordered: list[RawEntry], place: ChunkPlace
    ) -> list[tuple[list[RawEntry], bytes]]:
        """`ordered` cut into runs of about equal encoded size, each within
        `chunk_entries` and `chunk_bytes`, with their encodings.

        Sizes are estimated first (names are prefix-compressed; ages are stored from the
        chunk's latest synced_ms, so an older entry can take a few bytes more than its own
        body), then checked on the real encoding: a run still too large is halved.
        """
        base = max(e.synced_ms for e in ordered)
        weights, previous = [], ""
        for item in ordered:
            shared = len(os.path.commonprefix((previous, item.name)))
            # The body holds an age of 0 (one byte); in the chunk it may need more.
            age_bytes = -(-(base - item.synced_ms).bit_length() // 7)
            weights.append(len(item.name) - shared + len(item.body) + 2 + max(1, age_bytes))
            previous = item.name
        total = sum(weights)
        # A run also carries the chunk's header and its first name uncompressed.
        room = max(1, self.chunk_bytes - _CHUNK_HEADER - max(len(e.name.encode()) for e in ordered))
        count = max(-(-len(ordered) // self.chunk_entries), -(-total // room))
        target = -(-total // count)
        runs: list[list[RawEntry]] = [[]]
        run_weight = 0
        for item, weight in zip(ordered, weights, strict=True):
            run = runs[-1]
            if run and (run_weight + weight > target or len(run) >= self.chunk_entries):
                runs.append([])
                run_weight = 0
            runs[-1].append(item)
            run_weight += weight
        out: list[tuple[list[RawEntry], bytes]] = []
        while runs:
            run = runs.pop(0)
            encoded = encode_chunk(run, place)
            if len(encoded) > self.chunk_bytes and len(run) > 1:
                half = len(run) // 2
                runs[:0] = [run[:half], run[half:]]
                continue
            out.append((run, encoded))
        return out


def _first_at_or_after(keys: list[bytes], wanted: bytes) -> bytes | None:
    index = bisect.bisect_left(keys, wanted)
    return keys[index] if index < len(keys) else None
