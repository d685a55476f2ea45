"""README.md's examples run as pasted, against a cluster started the way a user starts one.

Which snippets run (the rule is in README.md's source, where a reader sees it):
- a fence whose info string is `sh` or `python` runs; any other fence (`text`, none) is
  only shown;
- unless the line right before it is `<!-- not run: REASON -->` (kubectl, docker-compose,
  FUSE without libfuse, a second cluster, installs): the reason is required.

How they run, in README order, from one scratch directory (the user's cwd) with one state
directory ($RESERVOIR_STATE_DIR, the user's ~/.reservoir) and the environment of a user
(no master, TLS, token or AWS_* settings of the test run's own: the cluster is a default
one even in a RESERVOIR_TEST_SECURE=1 run):
- `sh`: bash with `set -e -o pipefail` (every command's exit code counts, in pipes too)
  and the venv's bin first on PATH;
- `python`: a file of its own in a fresh interpreter (DataLoader workers can import it);
- the `export NAME=VALUE` lines a snippet prints on stderr are pasted: later snippets run
  with them set, as a user pastes what `reservoir local up` prints.
The README's own `reservoir local up` starts the cluster; `reservoir local down` stops it
at the end, whatever happened.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reservoir.local.cluster import DEV_CREDENTIALS
from tests.conftest import own_cluster_env

README = Path(__file__).resolve().parents[2] / "README.md"
RUNNABLE = {"sh", "python"}
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>.*\S.*) -->")
EXPORT = re.compile(r"^export (?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>\S+)$", re.M)
SNIPPET_TIMEOUT_S = 180
AWS_OWN = {*DEV_CREDENTIALS, "AWS_ENDPOINT_URL", "AWS_PROFILE"}


@dataclass(frozen=True)
class Snippet:
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    skip_reason: str  # "" when it runs

    @property
    def runs(self) -> bool:
        return self.language in RUNNABLE and not self.skip_reason


def snippets(text: str) -> list[Snippet]:
    """Every fenced block of a Markdown text, with its info string and not-run marker."""
    found: list[Snippet] = []
    lines = text.split("\n")
    n = 0
    while n < len(lines):
        opening = re.match(r"^```(\S*)\s*$", lines[n])
        if not opening:
            n += 1
            continue
        end = next(i for i in range(n + 1, len(lines)) if lines[i].startswith("```"))
        marker = NOT_RUN.fullmatch(lines[n - 1].strip()) if n else None
        found.append(
            Snippet(
                line=n + 1,
                language=opening.group(1),
                code="\n".join(lines[n + 1 : end]) + "\n",
                skip_reason=marker.group("reason") if marker else "",
            )
        )
        n = end + 1
    return found


@dataclass
class User:
    """A shell user in a scratch directory, with what they pasted so far."""

    home: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return self.home / "state"

    def run(self, snippet: Snippet, number: int) -> subprocess.CompletedProcess[str]:
        if snippet.language == "sh":
            argv = ["bash", "-c", "set -e -o pipefail\n" + snippet.code]
        else:
            script = self.home / f"readme_snippet_{number}.py"
            script.write_text(snippet.code)
            argv = [sys.executable, script.name]
        done = subprocess.run(
            argv,
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=SNIPPET_TIMEOUT_S,
        )
        self.env.update({m["name"]: m["value"] for m in EXPORT.finditer(done.stderr)})
        return done


@pytest.fixture
def user(tmp_path: Path) -> Iterator[User]:
    venv_bin = str(Path(sys.executable).parent)
    u = User(home=tmp_path)
    # No AWS_* of the test run's own (conftest sets the dev credentials): a user has only
    # what `local up` printed and they pasted.
    env = {k: v for k, v in own_cluster_env().items() if k not in AWS_OWN}
    u.env = env | {
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "RESERVOIR_STATE_DIR": str(u.state_dir),
        # Hugging Face's cache: this run's own (a user's is in $HOME).
        "HF_HOME": str(tmp_path / "hf"),
    }
    try:
        yield u
    finally:
        if (u.state_dir / "cluster.json").exists():
            subprocess.run(
                [venv_bin + "/reservoir", "local", "down"],
                env=u.env,
                capture_output=True,
                timeout=180,
            )


def test_readme_shell_and_python_snippets_are_sh_or_python_and_each_one_not_run_says_why() -> None:
    found = snippets(README.read_text())
    shell_or_python = [s for s in found if s.language in {"sh", "python", "bash", "shell", "py"}]
    assert all(s.language in RUNNABLE for s in shell_or_python), (
        "shell and Python snippets are ```sh and ```python: "
        + ", ".join(f"line {s.line}: {s.language}" for s in shell_or_python)
    )
    for s in found:
        assert s.skip_reason or s.language in RUNNABLE or s.language in {"text", ""}, (
            f"README.md line {s.line}: ```{s.language} is neither run nor plain text"
        )
    runnable = [s for s in found if s.runs]
    assert "reservoir local up" in runnable[0].code, "the first runnable snippet starts the cluster"
    assert len(runnable) >= 10


def test_readme_snippets_run_as_pasted_against_a_local_cluster(user: User) -> None:
    runnable = [s for s in snippets(README.read_text()) if s.runs]
    for number, snippet in enumerate(runnable, 1):
        done = user.run(snippet, number)
        assert done.returncode == 0, (
            f"README.md line {snippet.line} (```{snippet.language}) failed "
            f"with exit code {done.returncode}:\n{snippet.code}\n--- stderr:\n{done.stderr}"
        )


def test_local_up_prints_lines_that_point_boto3_at_its_s3_and_mount_what_they_put_there(
    user: User,
) -> None:
    up = user.run(Snippet(0, "sh", "reservoir local up --workers 1\n", ""), 0)
    assert up.returncode == 0, up.stderr
    endpoint = user.env["AWS_ENDPOINT_URL"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", endpoint), up.stderr
    block = up.stderr[up.stderr.index("# S3: ") :]
    (user.home / "data.bin").write_bytes(b"reservoir " * 100)

    # The block as pasted: comments, exports, the upload and the mount with the real port.
    pasted = user.run(Snippet(0, "sh", block, ""), 0)

    assert pasted.returncode == 0, f"{block}\n--- stderr:\n{pasted.stderr}"
    assert f"--endpoint-url {endpoint}" in block
    assert (
        pasted.stdout.splitlines()[-1] == "data.bin"
    )  # the last line: `reservoir ls` of the mount
    cat = user.run(Snippet(0, "sh", "reservoir cat /datasets/my-data/data.bin\n", ""), 0)
    assert cat.stdout == "reservoir " * 100
    # README.md shows the same block (its port and state directory are an example's).
    shown = next(s.code for s in snippets(README.read_text()) if s.code.startswith("# S3: "))
    normalized = block.replace(endpoint, "ENDPOINT").replace(str(user.state_dir), "STATE")
    normalized = normalized.replace(sys.executable, "PYTHON")  # the interpreter with boto3
    example_endpoint = re.search(r"http://127\.0\.0\.1:\d+", shown)
    assert example_endpoint is not None
    shown = shown.replace(example_endpoint.group(), "ENDPOINT")
    shown = re.sub(r"state: \S+", "state: STATE", shown)
    shown = re.sub(r"^/\S+/bin/python3? ", "PYTHON ", shown, flags=re.MULTILINE)
    assert normalized.strip() == shown.strip()
    status = user.run(Snippet(0, "sh", "reservoir local status --json\n", ""), 0)
    assert json.loads(status.stdout)["s3_env"]["AWS_ENDPOINT_URL"] == endpoint
    status = user.run(Snippet(0, "sh", "reservoir local status\n", ""), 0)
    assert f"export AWS_ENDPOINT_URL={endpoint}\n" in status.stderr
