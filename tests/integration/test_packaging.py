"""The installed package as a user's own code sees it: mypy run on a file outside the
checkout finds `reservoir` with its types (an editable install is an import hook that
type checkers do not run; build_support/reservoir_build_backend.py adds the .pth they read)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

USER_CODE = """\
import reservoir.client

count: int = reservoir.client.Client("127.0.0.1:1")
"""


def _editable() -> bool:
    # Every copy of the metadata: the checkout's own egg-info may come first on sys.path.
    for dist in metadata.distributions(name="reservoir-cache"):
        direct_url = dist.read_text("direct_url.json")
        if direct_url and json.loads(direct_url).get("dir_info", {}).get("editable"):
            return True
    return False


def test_mypy_outside_the_checkout_sees_the_types_of_an_editable_install(tmp_path: Path) -> None:
    if not _editable():
        pytest.skip("reservoir-cache is not installed editable here (pip install -e .)")
    (tmp_path / "train.py").write_text(USER_CODE)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / "c"),
         "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert "py.typed" not in checked.stdout and "import-not-found" not in checked.stdout, (
        checked.stdout
    )
    # The one error in the file, found only by reading Client's types.
    assert checked.returncode == 1
    assert 'expression has type "Client", variable has type "int"' in checked.stdout
