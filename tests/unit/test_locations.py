"""The master's block-location table: what reports and load-job confirmations leave in it."""

from __future__ import annotations

from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.master.locations import BlockLocationTable


def _table() -> BlockLocationTable:
    return BlockLocationTable(MemoryMetadataStore())


def test_a_full_report_keeps_blocks_confirmed_since_the_workers_previous_report() -> None:
    table = _table()
    table.apply("w1", True, [("f", 0)], [])
    table.record("w1", "f", 1)  # loaded for a job, perhaps after the next snapshot
    table.apply("w1", True, [("f", 0)], [])
    assert table.holders("f") == {0: ["w1"], 1: ["w1"]}


def test_a_full_report_drops_blocks_confirmed_before_the_workers_previous_report() -> None:
    table = _table()
    table.record("w1", "f", 1)
    table.apply("w1", False, [], [])  # this report's snapshot came later: it is the truth
    table.apply("w1", True, [("f", 0)], [])
    assert table.holders("f") == {0: ["w1"]}


def test_a_full_report_replaces_only_its_own_workers_blocks() -> None:
    table = _table()
    table.apply("w1", True, [("f", 0), ("f", 1)], [])
    table.apply("w2", True, [("f", 1)], [])
    table.apply("w1", True, [("f", 0)], [])
    assert table.holders("f") == {0: ["w1"], 1: ["w2"]}
