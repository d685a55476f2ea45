"""Reservoir paths: absolute, '/'-separated, normalised."""

from __future__ import annotations

from .errors import InvalidArgument

ROOT = "/"


def normalize(path: str) -> str:
    """Returns the canonical form of `path` or raises InvalidArgument.

    Repeated and trailing slashes are folded; '.', '..', NUL and non-absolute paths are
    refused rather than resolved, so a path never means something its caller did not see.
    """
    if not isinstance(path, str) or not path:
        raise InvalidArgument("path must be a non-empty string")
    if not path.startswith("/"):
        raise InvalidArgument(f"path must be absolute: {path!r}")
    if "\x00" in path:
        raise InvalidArgument("path must not contain NUL")
    parts = path.split("/")[1:]
    if parts and parts[-1] == "":
        parts = parts[:-1]
    for part in parts:
        if part == "":
            raise InvalidArgument(f"path has an empty component: {path!r}")
        if part in (".", ".."):
            raise InvalidArgument(f"path must not contain {part!r}: {path!r}")
    return "/" + "/".join(parts)


def join(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name if parent != ROOT else "/" + name


def parent_of(path: str) -> str:
    if path == ROOT:
        return ROOT
    head = path.rsplit("/", 1)[0]
    return head or ROOT


def is_within(path: str, prefix: str) -> bool:
    """True when `path` is `prefix` or lies below it."""
    return prefix == ROOT or path == prefix or path.startswith(prefix + "/")
