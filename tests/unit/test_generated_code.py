import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_generated_grpc_code_is_fresh(tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is needed to run scripts/gen_protos.sh")
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/gen_protos.sh"), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": os.path.join(sys.prefix, "bin", "python")},
    )
    assert done.returncode == 0, done.stderr
    fresh = tmp_path / "reservoir" / "v1"
    committed = ROOT / "services" / "common" / "reservoir" / "v1"
    names = sorted(p.name for p in fresh.iterdir() if p.suffix in (".py", ".pyi"))
    assert names == sorted(p.name for p in committed.iterdir() if p.suffix in (".py", ".pyi"))
    _, mismatch, errors = filecmp.cmpfiles(fresh, committed, names, shallow=False)
    assert not mismatch and not errors, f"run scripts/gen_protos.sh: stale {mismatch + errors}"
