"""What the commands print: data on stdout (tables for people, plain JSON with --json),
everything else on stderr."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from typing import Any

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


def duration_text(seconds: float) -> str:
    """A duration in the one unit that reads best: '35 s' below two minutes, '12 min'
    below two hours, '5.5 h' below two days, then '3.2 d'."""
    if seconds < 0:
        raise ValueError("a duration is never negative")
    whole = round(seconds)
    if whole < 120:
        return f"{max(whole, 1) if seconds > 0 else 0} s"
    minutes = round(seconds / 60)
    if minutes < 120:
        return f"{minutes} min"
    hours = seconds / 3600
    if hours < 47.95:  # what would print as 48.0 h reads as 2.0 d
        return f"{hours:.1f} h"
    return f"{seconds / 86400:.1f} d"


def iso_time(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 in UTC with its offset; '-' for never."""
    if not ms:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds")


def iso_time_or_none(ms: int) -> str | None:
    return iso_time(ms) if ms else None


def time_fields(name: str, ms: int) -> dict[str, Any]:
    """A moment as --json prints it: `name` in ISO 8601 for people, `name_ms` beside it
    (milliseconds since the epoch) for programs; both null for never."""
    return {name: iso_time_or_none(ms), f"{name}_ms": ms or None}


class Table:
    """Columns under a header row, like `kubectl get`: text left-aligned, numbers right."""

    def __init__(
        self, *columns: str, numeric: Sequence[str] = (), widths: Sequence[int] = ()
    ) -> None:
        """`widths`: the least width of each column, so tables printed one after another
        (the pages of a listing, printed as they arrive) line up."""
        self._columns = columns
        self._numeric = set(numeric)
        self._widths = list(widths) + [0] * (len(columns) - len(widths))
        self._rows: list[list[str]] = []

    def row(self, *cells: object) -> None:
        if len(cells) != len(self._columns):
            raise ValueError(f"{len(cells)} cells for {len(self._columns)} columns")
        self._rows.append(["-" if c is None or c == "" else str(c) for c in cells])

    def render(self, empty: str = "", *, header: bool = True) -> str:
        if not self._rows and empty:
            return empty
        rows = [list(self._columns), *self._rows]
        widths = [max(least, *(len(r[i]) for r in rows)) for i, least in enumerate(self._widths)]
        lines = []
        for r in rows if header else self._rows:
            cells = [
                cell.rjust(w) if name in self._numeric else cell.ljust(w)
                for name, cell, w in zip(self._columns, r, widths, strict=True)
            ]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)


def print_json_array(items: Iterable[Any], flush_every: int = 1000) -> None:
    """What `print(json.dumps(list(items), indent=2))` prints, element by element as they
    come, without holding the list; flushed every `flush_every` elements."""
    out, count = sys.stdout, 0
    for item in items:
        out.write("[\n" if count == 0 else ",\n")
        out.write(textwrap.indent(json.dumps(item, indent=2), "  "))
        count += 1
        if count % flush_every == 0:
            out.flush()
    out.write("[]\n" if count == 0 else "\n]\n")


def fields(pairs: Sequence[tuple[str, object]]) -> str:
    """`name: value` lines (a `stat`, a `job show`), names aligned."""
    width = max((len(name) for name, _ in pairs), default=0)
    return "\n".join(
        f"{name + ':':{width + 1}} {'-' if v in (None, '') else v}" for name, v in pairs
    )
