"""The distribution's name: every install line a user copies installs this project."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from reservoir.common import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[2]
# `pip install 'name[extra]'` or `pip install name` as the README and error messages write it.
INSTALL = re.compile(r"pip install\s+'?([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?'?")


def test_the_distribution_is_not_the_unrelated_reservoir_on_pypi() -> None:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        name = tomllib.load(fh)["project"]["name"]
    assert name == DISTRIBUTION != "reservoir"
    assert metadata.version(DISTRIBUTION)  # what importlib.metadata knows the install by


def test_every_install_line_of_ours_names_our_distribution() -> None:
    sources = [ROOT / "README.md", *sorted((ROOT / "services").rglob("*.py"))]
    ours = {"reservoir", DISTRIBUTION}
    seen = 0
    for source in sources:
        for found in INSTALL.finditer(source.read_text()):
            if found.group(1) in ours:
                seen += 1
                assert found.group(1) == DISTRIBUTION, f"{source.name}: {found.group(0)}"
    assert seen >= 4  # README's torch and fuse extras, the CLI's hints for local and fuse


def test_extras_of_the_project_refer_to_the_project_by_its_own_name() -> None:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        extras = tomllib.load(fh)["project"]["optional-dependencies"]
    self_refs = [dep for deps in extras.values() for dep in deps if dep.startswith("reservoir")]
    assert self_refs
    assert all(dep.startswith(f"{DISTRIBUTION}[") for dep in self_refs), self_refs
