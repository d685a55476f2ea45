"""A server process that has stopped exits at once, however much it still holds: the
interpreter's last collections do not trace the heap (they took seconds per worker of a
cluster that had served hundreds of mounts, and `local down` waited them out)."""

from __future__ import annotations

import subprocess
import sys
import time

# Exiting with the heap traced takes ~1.2 s here, ~0.05 s with it frozen: a bound between.
EXITED_WITHIN_S = 0.4

_SERVER = """
import sys, time
from reservoir.common.serving import servers

kept = []

async def main() -> None:
    # What a long-serving server holds: many small objects referring to each other.
    for i in range(2_000_000):
        kept.append({"i": i, "peer": kept[-1] if kept else None, "v": [i]})

servers.run(main)
print(time.monotonic(), flush=True)
"""


def test_a_server_holding_millions_of_objects_exits_right_after_its_loop_ends() -> None:
    server = subprocess.Popen([sys.executable, "-c", _SERVER], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    stopped = float(server.stdout.readline())
    assert server.wait(timeout=60) == 0
    assert time.monotonic() - stopped < EXITED_WITHIN_S
