"""How a settings class is read: sizes and durations as people write them, each field's
environment variable, overrides, and where each value in use came from (`explain`)."""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from reservoir.common.errors import InvalidArgument, PermissionDenied

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1024 * GiB}


def parse_size(text: str | int) -> int:
    """'4MiB', '512k', '1g', '1048576' -> bytes (binary units)."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if not match:
        raise InvalidArgument(f"not a size: {text!r}")
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "").lower()[:1]])


def format_size(n: float) -> str:
    """Bytes for people: 1536 -> '1.5KiB' (the inverse of `parse_size`, rounded)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f}{unit}" if unit != "B" else f"{int(n)}B"
        n /= 1024
    return str(n)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """'500ms', '30s', '5m', '1h', '2' (seconds) -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise InvalidArgument(f"not a duration: {text!r} (e.g. 30s, 5m, 1h)")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def env(name: str) -> Any:
    """Field metadata naming the environment variable a setting is read from."""
    return {"env": name}


def _convert(raw: str, kind: Any, attribute: str, name: str) -> Any:
    """`raw` as the field's type. A field named `*_s` is a duration: `30s`, `5m`, `500ms`
    or plain seconds, whatever its type."""
    try:
        if attribute.endswith("_s") and kind in (int, float):
            seconds = parse_duration(raw)
            return seconds if kind is float else round(seconds)
        if kind is int:
            return parse_size(raw)
        if kind is float:
            return float(raw)
        if kind is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
    except (ValueError, InvalidArgument) as exc:
        raise InvalidArgument(
            f"setting {name}: cannot parse {raw!r} ({_expected(kind, attribute)})"
        ) from exc
    return raw


def _expected(kind: Any, attribute: str) -> str:
    if attribute.endswith("_s"):
        return "a duration: 30s, 5m, 500ms or seconds"
    if kind is int:
        return "a number or a size: 4096, 4MiB, 1g"
    if kind is bool:
        return "true or false"
    return "a number"


T = TypeVar("T")

# Where a setting's value came from (`reservoir config` shows it).
DEFAULT, ENVIRONMENT, GIVEN = "default", "environment", "given"


@dataclass(frozen=True)
class Setting:
    """One effective setting: its variable, the value in use and where it came from."""

    name: str  # the environment variable, e.g. RESERVOIR_RPC_TIMEOUT
    attribute: str  # where it sits in the settings, e.g. ufs.timeout_s
    value: Any
    source: str  # DEFAULT, ENVIRONMENT or GIVEN (an argument, a flag, discovery)
    secret: bool = False


def load(
    cls: type[T],
    environ: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> T:
    """Builds `cls` from defaults (the class's, then `defaults`), then the environment,
    then explicit overrides. Nested settings (`etcd`, `ufs`, ...) read the same
    environment."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = dict(defaults or {})
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        kind = hints[f.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            if overrides.get(f.name) is None:
                values[f.name] = load(kind, environ)
            continue
        name = f.metadata.get("env")
        if name and environ.get(name, "") != "":
            values[f.name] = _convert(environ[name], kind, f.name, name)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return cls(**values)


def explain(
    settings: Any, environ: Mapping[str, str] | None = None, prefix: str = ""
) -> list[Setting]:
    """Every setting of a loaded settings object with where its value came from: the
    environment when it names the variable and the value is what it says, the default
    when the value is the class's, else given (an argument, a flag, discovery)."""
    environ = os.environ if environ is None else environ
    cls = type(settings)
    hints = typing.get_type_hints(cls)
    defaults = cls()
    found: list[Setting] = []
    for f in dataclasses.fields(cls):
        value = getattr(settings, f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            found.extend(explain(value, environ, f"{prefix}{f.name}."))
            continue
        name = f.metadata.get("env")
        if not name:
            continue
        if (
            environ.get(name, "") != ""
            and _convert(environ[name], hints[f.name], f.name, name) == value
        ):
            source = ENVIRONMENT
        elif value == getattr(defaults, f.name):
            source = DEFAULT
        else:
            source = GIVEN
        found.append(Setting(name, prefix + f.name, value, source, secret=not f.repr))
    return found


def read_secret_file(path: str, what: str) -> str:
    """A token or password kept in a file (a mounted Secret); the error names the file,
    never its content."""
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise PermissionDenied(f"cannot read {what} {path}: {exc.strerror}") from exc
