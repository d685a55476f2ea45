"""The block-location table: which worker holds which block.

Fed by the workers' batched reports, kept in memory for lookups, and persisted to the
metadata store in batches — one key per (worker, file), written under the worker's lease,
so etcd itself drops a dead worker's entries when its lease expires.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from reservoir.common import logs
from reservoir.common.errors import NotFound
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import Lease, MetadataStore

log = logs.get_logger(__name__)


class BlockLocationTable:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._by_worker: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
        self._by_file: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
        # file -> the workers holding any of its blocks: a tally over a data set (its
        # locality) looks a file's holders up at once, not block by block.
        self._holding: dict[str, set[str]] = defaultdict(set)
        self._dirty: set[tuple[str, str]] = set()
        self._resets: set[str] = set()
        # Blocks a worker confirmed (`record`) since its last report reached us: its next
        # report may be a full one whose snapshot was taken before it loaded them.
        self._confirmed: dict[str, set[tuple[str, int]]] = defaultdict(set)

    async def load(self) -> None:
        """Reads the persisted table (a restarted master has it at once), replacing what
        was in memory (a master that leads again may have missed changes)."""
        self._by_worker.clear()
        self._by_file.clear()
        self._holding.clear()
        self._dirty.clear()
        self._resets.clear()
        self._confirmed.clear()
        async for page in self._store.scan_prefix(keyspace.LOCATIONS):
            for key, value in page:
                worker_id, _, file_id = key[len(keyspace.LOCATIONS) :].decode().partition("/")
                for index in json.loads(value):
                    self._add(worker_id, file_id, int(index))
        log.info("locations_loaded", workers=len(self._by_worker), files=len(self._by_file))

    def _add(self, worker_id: str, file_id: str, index: int) -> None:
        self._by_worker[worker_id][file_id].add(index)
        self._by_file[file_id][index].add(worker_id)
        self._holding[file_id].add(worker_id)

    def _remove(self, worker_id: str, file_id: str, index: int) -> None:
        indices = self._by_worker.get(worker_id, {}).get(file_id)
        if indices is not None:
            indices.discard(index)
            if not indices:
                self._release(worker_id, file_id)
        holders = self._by_file.get(file_id, {}).get(index)
        if holders is not None:
            holders.discard(worker_id)
            if not holders:
                del self._by_file[file_id][index]
                if not self._by_file[file_id]:
                    del self._by_file[file_id]

    def apply(
        self,
        worker_id: str,
        full: bool,
        added: list[tuple[str, int]],
        removed: list[tuple[str, int]],
    ) -> None:
        confirmed = self._confirmed.pop(worker_id, set())
        if full:
            self.forget_worker(worker_id)
            self._resets.add(worker_id)
            # The worker's reports are sequential, so it took this snapshot after its
            # previous report arrived: blocks confirmed before that are in it (or were
            # dropped since); blocks confirmed after it may be missing only because they
            # landed after the snapshot. They stay.
            added = [*added, *confirmed]
        for file_id, index in added:
            self._add(worker_id, file_id, index)
            self._dirty.add((worker_id, file_id))
        for file_id, index in removed:
            self._remove(worker_id, file_id, index)
            self._dirty.add((worker_id, file_id))

    def record(self, worker_id: str, file_id: str, index: int) -> None:
        """One block a worker confirmed it holds (e.g. loaded for a job)."""
        self._add(worker_id, file_id, index)
        self._dirty.add((worker_id, file_id))
        self._confirmed[worker_id].add((file_id, index))

    def drop(self, worker_id: str, file_id: str, index: int) -> None:
        """One block a worker confirmed it dropped (e.g. freed)."""
        self._remove(worker_id, file_id, index)
        self._dirty.add((worker_id, file_id))
        self._confirmed.get(worker_id, set()).discard((file_id, index))

    def forget_worker(self, worker_id: str) -> None:
        self._confirmed.pop(worker_id, None)
        files = self._by_worker.pop(worker_id, {})
        for file_id, indices in files.items():
            self._release(worker_id, file_id)
            for index in list(indices):
                holders = self._by_file.get(file_id, {}).get(index)
                if holders is not None:
                    holders.discard(worker_id)
                    if not holders:
                        del self._by_file[file_id][index]
            if file_id in self._by_file and not self._by_file[file_id]:
                del self._by_file[file_id]
        self._dirty = {d for d in self._dirty if d[0] != worker_id}

    def _release(self, worker_id: str, file_id: str) -> None:
        """`worker_id` holds no block of `file_id` any more."""
        holders = self._holding.get(file_id)
        if holders is not None:
            holders.discard(worker_id)
            if not holders:
                del self._holding[file_id]

    def prune(self, live_ids: set[str]) -> None:
        """Drops the entries of workers that are no longer registered."""
        for worker_id in [w for w in self._by_worker if w not in live_ids]:
            log.info("worker_locations_dropped", worker=worker_id)
            self.forget_worker(worker_id)

    def holds_any(self) -> bool:
        """Whether any worker holds any block."""
        return bool(self._by_file)

    def indices(self, file_id: str) -> list[int]:
        """The block indices of a file that some worker holds."""
        held = self._by_file.get(file_id)
        return [i for i, ids in held.items() if ids] if held else []

    @property
    def holding(self) -> Mapping[str, AbstractSet[str]]:
        """file -> the workers holding some block of it: the table's own mapping, whose
        `get` a tally over a million files calls without a method of ours around it."""
        return self._holding

    def blocks_held(self, file_id: str) -> int:
        """How many distinct blocks of a file some worker holds."""
        return len(self._by_file.get(file_id, ()))

    def blocks_of(self, worker_id: str) -> Mapping[str, AbstractSet[int]]:
        """file -> the block indices one worker holds: the table's own mapping (read it
        only)."""
        return self._by_worker.get(worker_id, {})

    def holders(self, file_id: str) -> dict[int, list[str]]:
        return {i: sorted(ids) for i, ids in self._by_file.get(file_id, {}).items() if ids}

    def held_by(self, worker_id: str) -> dict[str, list[int]]:
        """The blocks one worker holds, by file."""
        return {f: sorted(i) for f, i in self._by_worker.get(worker_id, {}).items() if i}

    def files(self) -> list[str]:
        """Every file some worker holds a block of."""
        return list(self._by_file)

    def pending_workers(self) -> set[str]:
        return {w for w, _ in self._dirty} | self._resets

    async def flush(self, leases: dict[str, Lease]) -> int:
        """Writes what changed since the last flush; returns the number of keys written.

        When the store fails, everything taken is put back to be written next time.
        """
        resets, self._resets = self._resets, set()
        dirty, self._dirty = self._dirty, set()
        try:
            return await self._write(resets, dirty, leases)
        except Exception:
            self._resets |= resets
            self._dirty |= dirty
            raise

    async def _write(
        self, resets: set[str], dirty: set[tuple[str, str]], leases: dict[str, Lease]
    ) -> int:
        for worker_id in resets:
            await self._store.delete_prefix(keyspace.locations_prefix(worker_id))
        puts: dict[str, list[tuple[bytes, bytes]]] = defaultdict(list)
        deletes: list[bytes] = []
        for worker_id, file_id in dirty:
            indices = self._by_worker.get(worker_id, {}).get(file_id)
            key = keyspace.location_key(worker_id, file_id)
            if indices:
                puts[worker_id].append((key, json.dumps(sorted(indices)).encode()))
            else:
                deletes.append(key)
        if deletes:
            await self._store.delete_many(deletes)
        for worker_id, items in puts.items():
            lease = leases.get(worker_id)
            if lease is None:
                continue  # not registered (any more): its entries go with it
            try:
                await self._store.put_many(items, lease)
            except NotFound:
                log.info("worker_lease_gone", worker=worker_id)
        return len(deletes) + sum(len(v) for v in puts.values())
