"""What one measured row holds (runs, medians, the checks it failed) and the machine info."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MiB = 1024 * 1024


@dataclass
class Run:
    seconds: float
    nbytes: int
    files: int
    s3: dict[str, int] = field(default_factory=dict)  # server-side request deltas by kind
    workers: dict[str, int] = field(default_factory=dict)  # worker stats deltas (reservoir)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mb_s(self) -> float:
        return self.nbytes / MiB / self.seconds

    @property
    def files_s(self) -> float:
        return self.files / self.seconds


@dataclass
class Row:
    dataset: str
    system: str
    runs: list[Run] = field(default_factory=list)
    note: str = ""
    problems: list[str] = field(default_factory=list)  # checks the runs failed

    @property
    def key(self) -> tuple[str, str]:
        return (self.dataset, self.system)

    def median(self, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.runs)

    def s3_gets(self) -> str:
        gets = sorted({r.s3.get("GET", 0) for r in self.runs})
        return "/".join(str(g) for g in gets) if gets else "-"

    def to_json(self) -> dict[str, Any]:
        measured = bool(self.runs)
        return {
            "dataset": self.dataset,
            "system": self.system,
            "note": self.note,
            "problems": self.problems,
            "median_mb_s": self.median("mb_s") if measured else None,
            "median_files_s": self.median("files_s") if measured else None,
            "median_seconds": self.median("seconds") if measured else None,
            "runs": [
                {
                    "seconds": r.seconds,
                    "bytes": r.nbytes,
                    "files": r.files,
                    "mb_s": r.mb_s,
                    "files_s": r.files_s,
                    "s3_requests": r.s3,
                    "worker_stats": r.workers,
                    **r.extra,
                }
                for r in self.runs
            ],
        }


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": sys.version,
        "platform": platform.platform(),
        "loadavg": os.getloadavg(),
    }
