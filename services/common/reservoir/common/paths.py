"""Reservoir paths: absolute, '/'-separated, normalised."""

from __future__ import annotations

from reservoir.common.errors import InvalidArgument

ROOT = "/"
MAX_PATH_BYTES = 4096  # PATH_MAX
MAX_NAME_BYTES = 255  # NAME_MAX
_SHOWN = 120


def shown(path: str) -> str:
    """`path` as an error message may quote it: never longer than a line."""
    if len(path) <= _SHOWN:
        return repr(path)
    return f"{path[:_SHOWN]!r}... ({len(path.encode(errors='replace'))} bytes)"


def normalize(path: str) -> str:
    """Returns the canonical form of `path` or raises InvalidArgument.

    Repeated and trailing slashes are folded; '.', '..', NUL and non-absolute paths are
    refused rather than resolved, so a path never means something its caller did not see.
    """
    if not isinstance(path, str) or not path:
        raise InvalidArgument("path must be a non-empty string")
    if len(path.encode(errors="replace")) > MAX_PATH_BYTES:
        raise InvalidArgument(f"path longer than {MAX_PATH_BYTES} bytes: {shown(path)}")
    if not path.startswith("/"):
        raise InvalidArgument(f"path must be absolute: {shown(path)}")
    if "\x00" in path:
        raise InvalidArgument("path must not contain NUL")
    parts = path.split("/")[1:]
    if parts and parts[-1] == "":
        parts = parts[:-1]
    for part in parts:
        if part == "":
            raise InvalidArgument(f"path has an empty component: {shown(path)}")
        if part in (".", ".."):
            raise InvalidArgument(f"path must not contain {part!r}: {shown(path)}")
        if len(part.encode(errors="replace")) > MAX_NAME_BYTES:
            raise InvalidArgument(
                f"path component longer than {MAX_NAME_BYTES} bytes: {shown(path)}"
            )
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
