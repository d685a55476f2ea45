"""The local launcher's Supervisor stops a group of processes side by side: `local down`
takes as long as the slowest server of a rank, not the sum of them."""

from __future__ import annotations

import signal
import sys
import time
from functools import partial
from pathlib import Path

from reservoir.local.process import Process, Supervisor

# Marks when SIGTERM arrived, takes a while to shut down (as a server finishing its
# calls does), marks when it is done, and exits.
_SLOW_TO_STOP = """
import signal, sys, time
from pathlib import Path

marks = Path(sys.argv[1])

def stop(signum, frame):
    marks.write_text(f"term {time.monotonic()}\\n")
    time.sleep(1.0)
    with marks.open("a") as f:
        f.write(f"exit {time.monotonic()}\\n")
    sys.exit(0)

signal.signal(signal.SIGTERM, stop)
marks.write_text("ready\\n")
time.sleep(60)
"""


def _ready(marks: Path) -> bool:
    return marks.read_text() == "ready\n"


def _marks(path: Path) -> dict[str, float]:
    return {k: float(v) for k, v in (line.split() for line in path.read_text().splitlines())}


def test_stop_all_signals_every_process_before_any_has_finished_stopping(
    tmp_path: Path,
) -> None:
    supervisor = Supervisor()
    procs: list[Process] = []
    for n in range(3):
        argv = [sys.executable, "-c", _SLOW_TO_STOP, str(tmp_path / f"marks{n}")]
        proc = Process(f"worker{n + 1}", argv, {}, 0, str(tmp_path / f"p{n}.log"))
        supervisor.spawn(proc)
        procs.append(proc)
    for n, proc in enumerate(procs):
        supervisor.wait_ready(proc, partial(_ready, tmp_path / f"marks{n}"), 30)

    supervisor.stop_all(procs, timeout_s=30)

    stops = [_marks(tmp_path / f"marks{n}") for n in range(3)]
    assert all("exit" in m for m in stops), "each stopped by its SIGTERM, not killed"
    assert max(m["term"] for m in stops) < min(m["exit"] for m in stops)
    assert not any(p.alive() for p in procs)


def _stopped_now(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def _stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal, once the signal has been delivered."""
    deadline = time.monotonic() + 2
    while not _stopped_now(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return _stopped_now(pid)


def test_a_paused_process_stays_alive_and_resumes_and_kill_then_ends_it(tmp_path: Path) -> None:
    supervisor = Supervisor()
    marks = tmp_path / "marks"
    argv = [sys.executable, "-c", _SLOW_TO_STOP, str(marks)]
    proc = Process("master", argv, {}, 0, str(tmp_path / "p.log"))
    supervisor.spawn(proc)
    supervisor.wait_ready(proc, partial(_ready, marks), 30)
    started = time.monotonic()
    supervisor.kill(proc, signal.SIGSTOP)  # frozen, as a hung server: not waited for
    assert time.monotonic() - started < 2
    assert proc.alive() and _stopped(proc.pid)
    supervisor.kill(proc, signal.SIGCONT)
    time.sleep(0.1)
    assert proc.alive() and not _stopped_now(proc.pid)
    supervisor.kill(proc)
    assert not proc.alive()
