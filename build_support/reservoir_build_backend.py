"""setuptools' build backend, with the source roots on sys.path for an editable install.

The `reservoir.*` packages live in five directories (`services/<part>/reservoir/...`), so
setuptools installs the project editable through an import hook. Python runs it; type
checkers do not, and mypy run outside the checkout then says the package has no "library
stubs or py.typed marker". An editable wheel built here also carries a .pth naming the
five `services/<part>` directories: there mypy (and pyright) find `reservoir` as the
namespace package it is, with its `py.typed` markers, and Python finds the same modules
by either route. Every other hook is setuptools' own.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every hook not overridden here

PROJECT = Path(__file__).resolve().parent.parent
SOURCE_ROOTS = ("common", "master", "worker", "client", "local")
PTH_NAME = "__editable__.reservoir_cache_source_roots.pth"


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    name: str = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    add_source_roots(Path(wheel_directory) / name)
    return name


def add_source_roots(wheel: Path) -> None:
    """Rewrites `wheel` with the .pth added and listed in its RECORD (installers check
    that every file is listed)."""
    body = "".join(f"{PROJECT / 'services' / part}\n" for part in SOURCE_ROOTS).encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
    rewritten = wheel.with_suffix(".tmp")
    with (
        zipfile.ZipFile(wheel) as old,
        zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as new,
    ):
        for item in old.infolist():
            data = old.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                data += f"{PTH_NAME},sha256={digest},{len(body)}\n".encode()
            new.writestr(item, data)
        new.writestr(PTH_NAME, body)
    os.replace(rewritten, wheel)
