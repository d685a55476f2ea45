"""`reservoir load --wait` progress: the share of bytes cached and the time left, each
in one unit a person reads at a glance."""

from __future__ import annotations

import pytest

from reservoir.cli.job_commands import progress_line
from reservoir.cli.output import duration_text
from reservoir.client import JobState, LoadJob
from reservoir.common.config import GiB, MiB

START_MS = 1_760_000_000_000


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (0.2, "1 s"),
        (35.4, "35 s"),
        (119.4, "119 s"),
        (119.6, "2 min"),
        (754, "13 min"),
        (7140, "119 min"),
        (7200, "2.0 h"),
        (5.5 * 3600, "5.5 h"),
        (47.9 * 3600, "47.9 h"),
        (48 * 3600, "2.0 d"),
        (9 * 86400, "9.0 d"),
    ],
)
def test_a_duration_reads_in_one_unit(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_a_negative_duration_is_refused() -> None:
    with pytest.raises(ValueError):
        duration_text(-1)


def _job(state: JobState, done: int, total: int, elapsed_s: float) -> LoadJob:
    return LoadJob(
        id="j1",
        path="/d",
        state=state,
        total_files=3,
        total_blocks=total // MiB,
        total_bytes=total,
        done_blocks=done // MiB,
        done_bytes=done,
        created_ms=START_MS,
        updated_ms=START_MS + int(elapsed_s * 1000),
    )


def test_running_job_shows_percent_of_bytes_and_eta_from_the_byte_rate() -> None:
    # 1.2 GiB in 24 s: 51.2 MiB/s; the 1.7 GiB left take 34 s more.
    line = progress_line(_job(JobState.RUNNING, int(1.2 * GiB), int(2.9 * GiB), 24.0))
    assert line.startswith("running    41%  1.2GiB of 2.9GiB, ETA 34 s  (")
    assert "1228/2969 blocks, 0 failed, 3 files, 51.2MiB/s)" in line


def test_a_long_eta_is_in_minutes() -> None:
    line = progress_line(_job(JobState.RUNNING, 10 * MiB, 1010 * MiB, 10.0))  # 1000 s left
    assert ", ETA 17 min  (" in line


def test_before_any_byte_landed_the_eta_is_unknown() -> None:
    line = progress_line(_job(JobState.PENDING, 0, 0, 0.5))
    assert line.startswith("pending     0%  0B of 0B, ETA -  (0/0 blocks")
    assert "/s" not in line


def test_a_finished_job_shows_how_long_it_took() -> None:
    line = progress_line(_job(JobState.COMPLETED, 2 * GiB, 2 * GiB, 150.0))
    assert line.startswith("completed 100%  2.0GiB of 2.0GiB in 2 min  (")
    assert "ETA" not in line


def test_the_percentage_never_rounds_up_to_done() -> None:
    line = progress_line(_job(JobState.RUNNING, 999 * MiB, 1000 * MiB, 10.0))
    assert " 99%  " in line
