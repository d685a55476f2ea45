"""What the commands print: data on stdout (tables for people, plain JSON with --json),
everything else on stderr."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from reservoir.common.config import format_size

EXIT_ERROR = 1


def emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    """`data` as JSON with --json, else the text for people. Non-JSON values raise here
    rather than reach the user as Python reprs."""
    print(json.dumps(data, indent=2) if args.json else text())


def note(message: str) -> None:
    """A line for the person at the terminal, never part of the data."""
    print(message, file=sys.stderr)


def human(n: float) -> str:
    return format_size(n)


def iso_time(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 in UTC with its offset; '-' for never."""
    if not ms:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds")


def iso_time_or_none(ms: int) -> str | None:
    return iso_time(ms) if ms else None


class Table:
    """Columns under a header row, like `kubectl get`: text left-aligned, numbers right."""

    def __init__(self, *columns: str, numeric: Sequence[str] = ()) -> None:
        self._columns = columns
        self._numeric = set(numeric)
        self._rows: list[list[str]] = []

    def row(self, *cells: object) -> None:
        if len(cells) != len(self._columns):
            raise ValueError(f"{len(cells)} cells for {len(self._columns)} columns")
        self._rows.append(["-" if c is None or c == "" else str(c) for c in cells])

    def render(self, empty: str = "") -> str:
        if not self._rows and empty:
            return empty
        rows = [list(self._columns), *self._rows]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self._columns))]
        lines = []
        for r in rows:
            cells = [
                cell.rjust(w) if name in self._numeric else cell.ljust(w)
                for name, cell, w in zip(self._columns, r, widths, strict=True)
            ]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, object]]) -> str:
    """`name: value` lines (a `stat`, a `job show`), names aligned."""
    width = max((len(name) for name, _ in pairs), default=0)
    return "\n".join(
        f"{name + ':':{width + 1}} {'-' if v in (None, '') else v}" for name, v in pairs
    )


def message_dict(message: Message) -> dict[str, Any]:
    """Every field of a protobuf message as plain JSON values: int64 stays a number (as
    json_format would not keep it), unset fields have their defaults."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        entry = field.message_type if field.type == FieldDescriptor.TYPE_MESSAGE else None
        if entry is not None and entry.GetOptions().map_entry:
            # A map (e.g. WorkerStats.bytes_served); our maps have scalar values.
            out[field.name] = dict(sorted(value.items()))
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            out[field.name] = (
                [message_dict(v) for v in value] if field.is_repeated else message_dict(value)
            )
        else:
            out[field.name] = list(value) if field.is_repeated else value
    return out
