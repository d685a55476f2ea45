"""The client installed at the lowest versions pyproject.toml allows reads from a cluster.

A floor that is too low installs and then fails at import (the generated code checks its
grpcio and protobuf), so each floor is installed, pinned, in a fresh venv: the project's
wheel with `--constraint` pinning every dependency to its floor, then an SDK read, an
fsspec read and a CLI read against a real cluster. pip's cache makes a repeat run ~15 s.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.conftest import new_mount_path

REPO = Path(__file__).resolve().parents[2]


def floors() -> dict[str, str]:
    """name -> the `>=` version of every dependency of the plain (client) install."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    found = {}
    for line in project["dependencies"]:
        requirement = Requirement(line)
        lows = [s.version for s in requirement.specifier if s.operator == ">="]
        assert len(lows) == 1, f"{line}: every dependency needs one floor (>=)"
        found[requirement.name] = lows[0]
    return found


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{argv[:4]}...: {done.stdout}\n{done.stderr}"
    return done  # type: ignore[no-any-return]


READ = """
import hashlib, sys
from importlib import metadata
import reservoir.v1.master_pb2_grpc, reservoir.v1.worker_pb2_grpc  # their version checks
from reservoir.client import Client

import fsspec

with Client(sys.argv[1]) as rs:
    data = rs.read(sys.argv[2])
with fsspec.open(f"reservoir://{sys.argv[2]}", "rb", master=sys.argv[1]) as f:
    assert f.read() == data, "fsspec reads what the SDK reads"
assert not [m for m in sys.modules if m.startswith("opentelemetry.sdk")], "the SDK is server-only"
print(hashlib.sha256(data).hexdigest())
"""


def test_the_client_at_its_dependency_floors_reads_from_a_cluster(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    pins = floors()
    assert {"grpcio", "protobuf", "opentelemetry-api"} <= set(pins)
    constraints = tmp_path / "floors.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
    wheels = tmp_path / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), str(REPO)],
        timeout=300,
    )  # fmt: skip
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=60)
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile",
         "--constraint", str(constraints), *map(str, wheels.glob("*.whl"))],
        timeout=600,
    )  # fmt: skip
    installed = _run(
        [str(python), "-c", "from importlib import metadata; import sys; "
         "print(' '.join(metadata.version(n) for n in sys.argv[1:]))", *pins],
        timeout=60,
    ).stdout.split()  # fmt: skip
    for (name, floor), version in zip(pins.items(), installed, strict=True):
        assert Version(version) == Version(floor), name

    s3 = cluster.s3_client()
    bucket = f"floors-{os.getpid()}"
    s3.create_bucket(Bucket=bucket)
    content = os.urandom(300_000)
    s3.put_object(Bucket=bucket, Key="d/f.bin", Body=content)
    root = new_mount_path()
    with Client(cluster.master_address) as rs:
        rs.mount(root, f"s3://{bucket}/d", endpoint_url=cluster.s3_endpoint)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    read = _run(
        [str(python), "-c", READ, cluster.master_address, f"{root}/f.bin"],
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert read.stdout.strip() == hashlib.sha256(content).hexdigest()
    cat = subprocess.run(
        [
            str(venv / "bin" / "reservoir"),
            "--master",
            cluster.master_address,
            "cat",
            f"{root}/f.bin",
        ],
        capture_output=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert cat.returncode == 0, cat.stderr
    assert cat.stdout == content
