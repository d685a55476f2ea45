"""The hedge budget (p99 of recent first-byte times between a floor and a ceiling) and
the bound on hedges (a token bucket: a share of reads plus a burst)."""

from __future__ import annotations

import pytest

from reservoir.client.hedge_budget import FirstByteTimes, hedge_budget
from reservoir.client.hedge_tokens import HedgeTokens
from reservoir.client.hedges import Hedges
from reservoir.client.penalty_box import PenaltyBox
from reservoir.common import config as cfg
from reservoir.common.errors import InvalidArgument


def _times(values: list[float]) -> FirstByteTimes:
    times = FirstByteTimes()
    for value in values:
        times.record(value)
    return times


def test_budget_is_the_ceiling_until_enough_first_byte_times_are_known() -> None:
    times = _times([0.001] * 5)
    assert times.p99() is None
    assert hedge_budget(times.p99(), 0.05, 1.0) == 1.0


def test_budget_is_the_p99_of_recent_first_byte_times_within_floor_and_ceiling() -> None:
    # One slow read in fifty: past the 99th percentile, so the p99 is the slow one's time.
    values = [0.2 if i % 50 == 49 else 0.002 for i in range(256)]
    times = _times(values)
    assert times.p99() == pytest.approx(0.2)
    assert hedge_budget(times.p99(), 0.05, 1.0) == pytest.approx(0.2)


def test_budget_never_goes_below_the_floor_nor_above_the_ceiling() -> None:
    assert hedge_budget(0.001, 0.05, 1.0) == 0.05
    assert hedge_budget(30.0, 0.05, 1.0) == 1.0


def test_a_zero_ceiling_turns_hedging_off() -> None:
    assert hedge_budget(0.2, 0.05, 0.0) is None
    assert hedge_budget(None, 0.05, 0.0) is None


def test_slow_first_byte_times_age_out_of_the_ring() -> None:
    times = _times([0.5] * 300)
    assert times.p99() == 0.5
    for _ in range(300):
        times.record(0.003)
    assert times.p99() == 0.003


def test_a_burst_of_hedges_then_one_in_twenty_reads() -> None:
    tokens = HedgeTokens(share=0.05, burst=3)
    assert [tokens.take() for _ in range(4)] == [True, True, True, False]
    hedges = 0
    for _ in range(1000):
        tokens.read()
        hedges += tokens.take()
    assert hedges == 50


def test_idle_reads_save_no_more_than_the_burst() -> None:
    tokens = HedgeTokens(share=0.05, burst=2)
    for _ in range(10_000):
        tokens.read()
    assert [tokens.take() for _ in range(3)] == [True, True, False]


def test_no_burst_and_no_share_never_hedges() -> None:
    tokens = HedgeTokens(share=0.0, burst=0)
    for _ in range(100):
        tokens.read()
    assert not tokens.take()


def test_hedges_count_reads_hedges_and_hedges_refused() -> None:
    hedges = Hedges(cfg.ClientConfig(read_hedge_share=0.0, read_hedge_burst=1), PenaltyBox(60))
    hedges.read_started()
    hedges.read_started()
    assert hedges.may_hedge("w1")
    assert not hedges.may_hedge("w1")
    stats = hedges.stats()
    assert (stats.reads, stats.hedged, stats.refused) == (2, 1, 1)
    assert stats.budget_s == 1.0  # the default ceiling: no first-byte times yet


def test_hedging_away_from_a_penalised_worker_spends_no_token() -> None:
    penalties = PenaltyBox(60)
    hedges = Hedges(cfg.ClientConfig(read_hedge_share=0.0, read_hedge_burst=1), penalties)
    assert hedges.may_hedge("w1")  # the first read to meet the hung worker: the token
    penalties.penalise("w1")
    assert all(hedges.may_hedge("w1") for _ in range(20))  # the reads in flight to it
    assert not hedges.may_hedge("w2")  # a healthy worker's tail: the bound holds


def test_hedge_settings_out_of_range_are_refused() -> None:
    with pytest.raises(InvalidArgument):
        cfg.ClientConfig(read_hedge_floor_s=-1.0)
    with pytest.raises(InvalidArgument):
        cfg.ClientConfig(read_hedge_share=1.5)


def test_a_file_not_read_before_gets_the_cold_budget_until_a_worker_answers_for_it() -> None:
    config = cfg.ClientConfig(read_hedge_after_s=1.0, read_hedge_cold_after_s=10.0)
    hedges = Hedges(config, PenaltyBox(60))
    assert hedges.budget("f1") == 10.0  # may be a miss the worker fetches from the store
    hedges.first_byte("f1", 3.0)  # ...as it was: a cold fetch's time is no sample
    assert hedges.budget("f1") == 1.0  # read before: the warm budget (ceiling: no p99 yet)
    for _ in range(64):
        hedges.first_byte("f1", 0.002)
    assert hedges.budget("f1") == 0.1  # the floor: warm first bytes are fast
    assert hedges.budget("f2") == 10.0


def test_a_zero_cold_budget_never_hedges_a_file_not_read_before() -> None:
    hedges = Hedges(cfg.ClientConfig(read_hedge_cold_after_s=0.0), PenaltyBox(60))
    assert hedges.budget("f1") is None
