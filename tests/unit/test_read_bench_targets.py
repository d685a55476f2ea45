"""The read bench's target table (bench/speed/targets.py): ratios of medians, verdicts."""

import pytest

from tests.bench_modules import load_bench_module

T = load_bench_module("speed/targets.py", "bench_speed_targets")


def medians(scale: float) -> dict[tuple[str, str], dict[str, float]]:
    """Every row any target names: rows only ever divided by are 100, each numerator
    `scale` x the highest target it has (warm large remote has two) times its
    denominator, a row that is both (warm large remote, the gateway's baseline) once its
    own numerators are set."""
    numerators = {t.numerator for t in T.TARGETS}
    out: dict[tuple[str, str], dict[str, float]] = {}
    for t in T.TARGETS:
        if t.denominator not in numerators:
            out[t.denominator] = {t.unit: 100.0}
    pending = list(T.TARGETS)
    while pending:
        for t in list(pending):
            if any(other.numerator == t.denominator for other in pending):
                continue  # its denominator is not final yet
            base = out[t.denominator][t.unit]
            value = out.setdefault(t.numerator, {}).get(t.unit, 0.0)
            out[t.numerator][t.unit] = max(value, base * t.target * scale)
            pending.remove(t)
    return out


def test_each_ratio_divides_the_medians_of_its_two_rows() -> None:
    outcomes = T.evaluate(
        {("small", T.COLD_READ): {"files_s": 270.0}, ("small", T.BOTO3): {"files_s": 300.0}},
        {},
    )
    cold = next(o for o in outcomes if o.target.numerator == ("small", T.COLD_READ))
    assert cold.ratio == pytest.approx(0.9)
    assert cold.met
    assert cold.verdict == "met"


def test_a_ratio_just_under_its_target_is_not_met() -> None:
    """Each row is set just under its strictest target; a row with two baselines then
    passes the laxer one (warm large remote: 0.99 x 0.6 of 100 is still >= 0.4 x 100;
    the gateway's warm large: 0.99 x 1.5 of boto3 is far above 0.5 of the SDK's read)."""
    outcomes = T.evaluate(medians(0.99), {})
    laxer = [
        o
        for o in outcomes
        if o.target.denominator == (T.CEILING, T.TCP)
        or o.target.metric == "gateway warm large / SDK warm remote read"
    ]
    assert [o.verdict for o in outcomes if o not in laxer] == ["not met"] * (len(T.TARGETS) - 2)
    assert [o.verdict for o in laxer] == ["met", "met"]
    assert f"2 of {len(T.TARGETS)} targets met" in T.targets_table(outcomes)


def test_every_target_met_when_every_ratio_reaches_it() -> None:
    outcomes = T.evaluate(medians(1.0), {})
    assert all(o.met for o in outcomes)
    assert f"{len(T.TARGETS)} of {len(T.TARGETS)} targets met" in T.targets_table(outcomes)


def test_a_row_that_failed_its_check_makes_the_target_invalid_whatever_the_ratio() -> None:
    problems = {("small", T.WARM_REMOTE_READ): ["not warm: 12 S3 GETs", "not warm: 12 S3 GETs"]}
    outcomes = T.evaluate(medians(5.0), problems)
    warm = next(o for o in outcomes if o.target.numerator == ("small", T.WARM_REMOTE_READ))
    assert warm.verdict == "invalid"
    assert not warm.met
    assert warm.problems == (f"{T.WARM_REMOTE_READ}: not warm: 12 S3 GETs",)
    assert "! " + warm.problems[0] in T.targets_table(outcomes)


def test_a_missing_row_is_not_measured_and_not_met() -> None:
    outcomes = T.evaluate({}, {})
    assert all(o.ratio is None and o.verdict == "not measured" for o in outcomes)
    assert all(o.to_json()["met"] is False for o in outcomes)


def test_warm_large_grpc_has_both_of_its_targets() -> None:
    names = {t.denominator for t in T.TARGETS if t.numerator == ("large", T.WARM_REMOTE_READ)}
    assert names == {("large", T.SIMPLECACHE_2), (T.CEILING, T.TCP)}
