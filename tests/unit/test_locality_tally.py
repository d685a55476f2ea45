"""The master's locality tally: bytes per host, zone and region from the location table
and the files below a path, each block counted once per place."""

from __future__ import annotations

from reservoir.master.locality import LocalityTally, Place
from reservoir.master.locations import BlockLocationTable

KiB = 1024
PLACES = {
    "w1": Place("h1", "zone-a", "east"),
    "w2": Place("h1", "zone-a", "east"),  # a second worker on h1
    "w3": Place("h2", "zone-a", "east"),
    "w4": Place("h3", "zone-b", "west"),
}


def _tally(held: dict[str, dict[int, set[str]]]) -> LocalityTally:
    """A tally over a location table holding `held` (file -> index -> workers)."""
    table = BlockLocationTable(store=None)  # type: ignore[arg-type]  # never flushed here
    for file_id, blocks in held.items():
        for index, workers in blocks.items():
            for worker in workers:
                table.record(worker, file_id, index)
    return LocalityTally(PLACES, table)


def test_a_block_on_two_workers_of_one_host_counts_once_for_that_host() -> None:
    tally = _tally({"f": {0: {"w1", "w2"}, 1: {"w1", "w3"}}})
    tally.add([(8 * KiB, 4 * KiB, "f")])
    found = tally.result("/d")
    assert [(h.host, h.bytes) for h in found.hosts] == [("h1", 8 * KiB), ("h2", 4 * KiB)]
    assert found.zones == {"zone-a": 8 * KiB} and found.regions == {"east": 8 * KiB}
    assert found.cached_bytes == found.bytes == 8 * KiB


def test_hosts_zones_and_regions_hold_the_bytes_of_their_blocks_most_first() -> None:
    # 10 KiB in 4 KiB blocks: the last block is 2 KiB.
    tally = _tally({"f": {0: {"w4"}, 2: {"w4"}}, "g": {0: {"w3"}}})
    tally.add([(10 * KiB, 4 * KiB, "f"), (4 * KiB, 4 * KiB, "g"), (3 * KiB, 4 * KiB, "")])
    found = tally.result("/d")
    assert found.files == 3 and found.bytes == 17 * KiB and found.cached_bytes == 10 * KiB
    assert [(h.host, h.zone, h.region, h.bytes) for h in found.hosts] == [
        ("h3", "zone-b", "west", 6 * KiB),
        ("h2", "zone-a", "east", 4 * KiB),
    ]
    assert list(found.zones.items()) == [("zone-b", 6 * KiB), ("zone-a", 4 * KiB)]


def test_a_small_file_held_on_two_hosts_counts_for_each_and_once_in_all() -> None:
    tally = _tally({"f": {0: {"w1", "w2", "w4"}}})
    tally.add([(3 * KiB, 4 * KiB, "f")])
    found = tally.result("/d")
    assert found.cached_bytes == 3 * KiB
    assert sorted((h.host, h.bytes) for h in found.hosts) == [("h1", 3 * KiB), ("h3", 3 * KiB)]
    assert found.zones == {"zone-a": 3 * KiB, "zone-b": 3 * KiB}
    assert found.regions == {"east": 3 * KiB, "west": 3 * KiB}


def test_a_file_spread_over_workers_once_each_counts_each_workers_blocks() -> None:
    tally = _tally({"f": {0: {"w1"}, 1: {"w2"}, 2: {"w4"}}})
    tally.add([(10 * KiB, 4 * KiB, "f")])
    found = tally.result("/d")
    assert found.cached_bytes == 10 * KiB
    assert [(h.host, h.bytes) for h in found.hosts] == [("h1", 8 * KiB), ("h3", 2 * KiB)]
    assert found.zones == {"zone-a": 8 * KiB, "zone-b": 2 * KiB}


def test_a_block_past_the_files_end_is_not_counted() -> None:
    # The table may still hold a longer old version's index under a reused id.
    tally = _tally({"f": {0: {"w1"}, 5: {"w1"}}})
    tally.add([(4 * KiB, 4 * KiB, "f")])
    assert tally.result("/d").cached_bytes == 4 * KiB


def test_a_worker_no_longer_registered_counts_as_cached_but_on_no_host() -> None:
    tally = _tally({"f": {0: {"gone"}, 1: {"gone", "w3"}}})
    tally.add([(8 * KiB, 4 * KiB, "f")])
    found = tally.result("/d")
    assert found.cached_bytes == 8 * KiB
    assert [(h.host, h.bytes) for h in found.hosts] == [("h2", 4 * KiB)]


def test_a_dropped_block_and_a_forgotten_worker_leave_the_tally() -> None:
    table = BlockLocationTable(store=None)  # type: ignore[arg-type]
    for index in range(3):
        table.record("w1", "f", index)
        table.record("w4", "f", index)
    table.drop("w1", "f", 0)
    table.forget_worker("w4")
    tally = LocalityTally(PLACES, table)
    tally.add([(12 * KiB, 4 * KiB, "f")])
    found = tally.result("/d")
    assert found.cached_bytes == 8 * KiB
    assert [(h.host, h.bytes) for h in found.hosts] == [("h1", 8 * KiB)]
    table.drop("w1", "f", 1)
    table.drop("w1", "f", 2)
    assert "f" not in table.holding
