"""A renamed file's cached blocks (master/renamed_blocks.py), in process: every worker
that may hold a block of the old file (the table's holders, and each block's home, which
holds a file just written before its report comes) is asked to keep it under the new id,
and the table points readers of the new name at those that did."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from reservoir.common.errors import Unavailable
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import Inode, WorkerRecord
from reservoir.common.placement import Candidate, block_key, placement
from reservoir.master.locations import BlockLocationTable
from reservoir.master.renamed_blocks import RenamedBlocks

OLD = Inode("/m/a.tmp", is_dir=False, size=10, block_size=4, file_id="old", mount_path="/m")
NEW = replace(OLD, path="/m/a", file_id="new")
WORKERS = [WorkerRecord(f"w{i}", f"127.0.0.1:{i}") for i in range(1, 5)]


class _Workers:
    """Each worker holds the blocks given; `down` ones fail as unreachable."""

    def __init__(self, held: dict[str, set[int]], down: set[str]) -> None:
        self.held, self.down = held, down
        self.asked: dict[str, list[int]] = {}

    async def workers(self) -> list[WorkerRecord]:
        return WORKERS

    async def copy_blocks(
        self, worker: WorkerRecord, source_file_id: str, file: Inode, indices: list[int]
    ) -> list[int]:
        assert (source_file_id, file.file_id) == ("old", "new")
        self.asked[worker.id] = indices
        if worker.id in self.down:
            raise Unavailable(f"worker {worker.id}")
        return [i for i in indices if i in self.held.get(worker.id, set())]


def test_holders_and_homes_are_asked_and_the_table_points_at_those_that_kept_blocks() -> None:
    async def scenario() -> None:
        table = BlockLocationTable(MemoryMetadataStore())
        homes = placement([Candidate(w.id, 1.0) for w in WORKERS])
        home = {i: homes.homes(block_key("old", i))[0] for i in range(OLD.block_count)}
        others = [w.id for w in WORKERS if w.id not in home.values()]
        extra, dead = others[0], others[-1] if len(others) > 1 else others[0]
        table.record(extra, "old", 2)  # a second replica the table knows of
        table.record(dead, "old", 0)
        held: dict[str, set[int]] = {extra: {2}}
        for index, worker_id in home.items():
            held.setdefault(worker_id, set()).add(index)
        workers = _Workers(held, down={dead})
        carried = await RenamedBlocks(table, workers, workers).carry(OLD, NEW)
        assert set(workers.asked) == {*home.values(), extra, dead}
        assert 2 in workers.asked[extra] and 0 in workers.asked[dead]
        holders = table.holders("new")
        assert sorted(holders) == [0, 1, 2]
        assert extra in holders[2] and all(dead not in ids for ids in holders.values())
        assert carried == sum(len(ids) for ids in holders.values())

    asyncio.run(scenario())


def test_a_file_of_another_size_or_block_size_carries_nothing() -> None:
    async def scenario() -> None:
        table = BlockLocationTable(MemoryMetadataStore())
        workers = _Workers({w.id: {0, 1, 2} for w in WORKERS}, down=set())
        blocks = RenamedBlocks(table, workers, workers)
        assert await blocks.carry(OLD, replace(NEW, size=11)) == 0
        assert await blocks.carry(OLD, replace(NEW, block_size=8)) == 0
        assert workers.asked == {} and table.holders("new") == {}

    asyncio.run(scenario())
