"""The CLI run as a user runs it: a process of its own, against a local cluster."""

from __future__ import annotations

import os
import subprocess
import sys

from reservoir.local.cluster import LocalCluster


def run_cli(
    cluster: LocalCluster, *args: str, stdin: str = "", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`reservoir --master <the cluster's masters> ARGS`, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "--master", cluster.master_address, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
        env={**os.environ},
    )
