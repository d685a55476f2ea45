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


def test_dependency_floors_are_the_versions_the_generated_code_was_made_for() -> None:
    import re
    import tomllib

    from packaging.requirements import Requirement

    generated = ROOT / "services" / "common" / "reservoir" / "v1"
    grpc_versions = {
        m.group(1)
        for path in generated.glob("*_pb2_grpc.py")
        for m in [re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", path.read_text())]
        if m
    }
    protobuf_versions = {
        ".".join(m.groups())
        for path in generated.glob("*_pb2.py")
        for m in [
            re.search(
                r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*"
                r"(\d+),\s*(\d+),\s*(\d+),",
                path.read_text(),
            )
        ]
        if m
    }
    assert len(grpc_versions) == 1 and len(protobuf_versions) == 1
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = {Requirement(r).name: Requirement(r) for r in project["dependencies"]}

    def floor(name: str) -> str:
        (low,) = [s.version for s in requirements[name].specifier if s.operator == ">="]
        return low

    (grpc_version,) = grpc_versions
    (protobuf_version,) = protobuf_versions
    assert floor("grpcio") == grpc_version
    assert floor("protobuf") == protobuf_version
    # Gencode runs on runtimes of its own major version.
    major = int(protobuf_version.split(".")[0])
    assert f"{major}.999" in requirements["protobuf"].specifier
    assert f"{major + 1}.0.0" not in requirements["protobuf"].specifier
    tools = [
        Requirement(r)
        for r in project["optional-dependencies"]["dev"]
        if Requirement(r).name == "grpcio-tools"
    ]
    assert [str(t.specifier) for t in tools] == [f"=={grpc_version}"]
