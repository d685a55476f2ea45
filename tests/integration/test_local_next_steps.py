"""The lines `reservoir local up` prints to paste next run, pasted into bash as they are,
for a `--secure` cluster with a gateway in a state directory that is not the default one,
by a user whose PATH has neither the venv's python nor its `reservoir`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import own_cluster_env

# A PATH without the venv: its `python3` (if any) may not have boto3.
BARE_PATH = "/usr/local/bin:/usr/bin:/bin"


@pytest.fixture
def user_home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    state_dir = tmp_path / "elsewhere" / "state"
    try:
        yield home
    finally:
        if (state_dir / "cluster.json").exists():
            subprocess.run(
                [sys.executable, "-m", "reservoir.cli.main", "--state-dir", str(state_dir),
                 "local", "down"],
                capture_output=True,
                timeout=180,
                env=own_cluster_env(),
            )  # fmt: skip


def _user_env(home: Path) -> dict[str, str]:
    """A shell user's environment: their HOME, a PATH without the venv, and nothing of
    this test run's (no AWS_*, no RESERVOIR_*)."""
    kept = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TMPDIR")}
    return kept | {"HOME": str(home), "PATH": BARE_PATH}


def test_the_printed_next_steps_run_as_pasted_on_a_secure_gateway_cluster_elsewhere(
    user_home: Path,
) -> None:
    state_dir = user_home.parent / "elsewhere" / "state"
    env = _user_env(user_home)
    up = subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "--state-dir", str(state_dir),
         "local", "up", "--workers", "1", "--secure", "--gateway"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    block = up.stderr[up.stderr.index("# S3: ") :]
    assert f"{sys.executable} -c" in block  # the interpreter that has boto3
    assert "reservoir-reader" in block and 'SECRET_ACCESS_KEY="$(awk' in block
    (user_home / "data.bin").write_bytes(b"pasted " * 100)

    pasted = subprocess.run(
        ["bash", "-c", "set -e -o pipefail\n" + block],
        cwd=user_home,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )

    assert pasted.returncode == 0, f"{block}\n--- stderr:\n{pasted.stderr}"
    # `reservoir ls` of the mount, then the gateway's listing of the same file.
    assert pasted.stdout.splitlines()[-2:] == ["data.bin", "my-data/data.bin"], pasted.stdout
    secrets = (state_dir / "gateway-keys").read_text().split()
    assert not any(len(s) > 20 and s in up.stderr for s in secrets)  # read, never printed
