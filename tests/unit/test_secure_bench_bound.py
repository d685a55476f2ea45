"""The secure read bench's bound (bench/secure_read_bench.py `cpu_bound`): the most a data
protection level can reach against default when reader and workers share the cores."""

import pytest

from tests.bench_modules import load_bench_module

B = load_bench_module("secure_read_bench.py", "secure_read_bench")
# Default spends 1 ms of CPU per MiB in all; each added pass runs at 1,000 MiB/s (1 ms/MiB).
DEFAULT = {"reader_ms_mib": 0.6, "workers_ms_mib": 0.4}
CEILINGS = {B.AES_CEILING: 1000.0, B.GMAC_CEILING: 1000.0}


@pytest.mark.parametrize("level", ["privacy", "integrity"])
def test_two_added_passes_as_costly_as_defaults_whole_read_leave_a_third(level: str) -> None:
    assert B.cpu_bound(level, DEFAULT, CEILINGS) == pytest.approx(1 / 3)


def test_a_faster_tag_raises_integritys_bound_and_leaves_privacys() -> None:
    faster = {**CEILINGS, B.GMAC_CEILING: 4000.0}
    assert B.cpu_bound("integrity", DEFAULT, faster) == pytest.approx(1 / 1.5)
    assert B.cpu_bound("privacy", DEFAULT, faster) == pytest.approx(1 / 3)


def test_the_table_states_each_levels_bound_and_marks_its_large_row() -> None:
    row = {key: 1.0 for key in B.CPU_KEYS} | DEFAULT
    medians = {mode: {"small": row, "large": row} for mode in B.MODES}
    paired = {key: 1.0 for key in B.TARGETS}
    text, verdicts = B.table(medians, paired, CEILINGS)
    assert "privacy 0.33, integrity 0.33" in text
    marked = {(v["level"], v["dataset"]) for v in verdicts if "cpu_bound" in v}
    assert marked == {("privacy", "large"), ("integrity", "large")}
