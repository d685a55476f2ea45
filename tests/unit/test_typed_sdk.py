"""A user's type checker sees the SDK's types: every package the distribution ships
carries `py.typed`, mypy (this environment's) checks a user's script against the installed
package, and a script that misuses the SDK is rejected."""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _shipped_packages() -> list[str]:
    return list(tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["packages"])


def test_every_shipped_package_is_marked_typed() -> None:
    packages = _shipped_packages()
    assert "reservoir.client" in packages
    untyped = [
        p for p in packages if not importlib.resources.files(p).joinpath("py.typed").is_file()
    ]
    assert untyped == []


def _installed_view(tmp_path: Path) -> Path:
    """A directory laid out as site-packages would be, each `reservoir.*` package being
    the directory the installed distribution imports it from. An editable install
    (`pip install -e`) reaches its packages through an import hook mypy cannot follow;
    on a path entry mypy reads them as installed packages, so PEP 561 holds as it does
    for a user: a package without `py.typed` is not analysed."""
    site = tmp_path / "site"
    (site / "reservoir").mkdir(parents=True)
    # Subpackages (reservoir.common.blocks) come with their parent's directory.
    for name in (p for p in _shipped_packages() if p.count(".") == 1):
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations, name
        (site / "reservoir" / name.split(".")[1]).symlink_to(spec.submodule_search_locations[0])
    return site


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The installed view and a mypy cache, shared by this module's checks: the second
    check reads the package's analysis from the cache instead of redoing it."""
    root = tmp_path_factory.mktemp("typed-sdk")
    _installed_view(root)
    return root


def _mypy(installed: Path, tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    """mypy --strict on `source` as a user's script, in a directory of its own (so
    nothing of this source tree is on its path but the installed view)."""
    work = tmp_path / "user"
    work.mkdir()
    script = work / "train.py"
    script.write_text(textwrap.dedent(source))
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    env["PYTHONPATH"] = str(installed / "site")
    return subprocess.run(
        [
            sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
            "--cache-dir", str(installed / "mypy-cache"), script.name,
        ],
        cwd=work, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip


TYPED_USE = """
    import asyncio
    import datetime
    from typing import assert_type

    from reservoir.client import (
        AsyncClient, CacheReport, Client, FreeResult, JobState, LoadJob, PinResult,
        WorkerStats,
    )


    def show(job: LoadJob) -> None:
        print(job)


    def warm(rs: Client) -> float:
        job = rs.submit_load(
            "/datasets/demo", replicas=2, priority_paths=["/datasets/demo/a"], files=()
        )
        assert_type(job, LoadJob)
        final = rs.watch_job(job.id, progress=show)
        assert_type(final.state, JobState)
        assert_type(final.finished, bool)
        assert_type(final.created, datetime.datetime | None)
        assert_type(final.eta_s, float | None)
        errors: tuple[str, ...] = final.errors
        print(final.done_blocks + final.failed_blocks, final.total_bytes - final.done_bytes)
        if final.state is JobState.COMPLETED and not errors:
            print(final.updated_ms - final.created_ms)
        report = rs.report("/datasets/demo")
        assert_type(report, CacheReport)
        assert_type(rs.jobs(), list[LoadJob])
        assert_type(rs.free("/datasets/demo"), FreeResult)
        assert_type(rs.pin("/datasets/demo").load_job_id, str)
        assert_type(rs.pin("/d"), PinResult)
        assert_type(rs.worker_stats()[0], WorkerStats)
        assert_type(rs.load_metadata("/d").listed, int)
        return report.cached_bytes / max(report.bytes, 1) + final.fraction_done


    async def watch(rs: AsyncClient, job_id: str) -> LoadJob | None:
        last = None
        async for job in rs.watch_job(job_id):
            last = job
        assert_type(await rs.cancel_job(job_id), LoadJob)
        return last


    with Client("127.0.0.1:19998") as rs:
        print(warm(rs))
    print(asyncio.run(watch(AsyncClient("127.0.0.1:19998"), "j1")))
"""


def test_mypy_accepts_a_typed_user_script_against_the_installed_package(
    installed: Path, tmp_path: Path
) -> None:
    result = _mypy(installed, tmp_path, TYPED_USE)
    assert result.returncode == 0, result.stdout + result.stderr


MISUSE = """
    from reservoir.client import Client

    rs = Client("127.0.0.1:19998")
    job = rs.submit_load("/d", replica=2)  # error: no such keyword
    rs.submit_load("/d", replicas="2")  # error: not an int
    job.state + 1  # error: a state is no number
    rs.report("/d").cached_bytes.upper()  # error: bytes are counted, an int
    rs.watch_job(job.id, progress=lambda text: text.decode())  # error: a job, not bytes
    job.done_blocks = 3  # error: a job is frozen
"""


def test_mypy_rejects_a_user_script_that_misuses_the_sdk(installed: Path, tmp_path: Path) -> None:
    result = _mypy(installed, tmp_path, MISUSE)
    source = textwrap.dedent(MISUSE).splitlines()
    expected = {i for i, line in enumerate(source, start=1) if "# error:" in line}
    flagged = {int(m) for m in re.findall(r"^train\.py:(\d+): error", result.stdout, re.M)}
    assert result.returncode == 1, result.stdout + result.stderr
    assert flagged == expected, result.stdout
