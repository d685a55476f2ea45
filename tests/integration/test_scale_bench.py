"""bench/scale_bench.py at a small N runs to the end and writes the measures it promises
(the 1M run is the same code with a bigger --files)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scale_bench.py"


def test_scale_bench_at_a_small_n_writes_every_measure(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    subprocess.run(
        [sys.executable, str(BENCH), "--files", "2000", "--layouts", "chunks", "--json", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (row,) = json.loads(out.read_text())["rows"]
    assert row["files"] == 2000 and row["layout"] == "chunks"
    for measure in ("bytes_per_file", "report_s", "stat_ms_median", "list_dir_ms", "keys"):
        assert row[measure] > 0, measure
