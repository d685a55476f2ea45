"""Where the command modules register their subcommands.

Every parser, the top one and each subcommand's, accepts the global options, so
`reservoir --json workers` and `reservoir workers --json` mean the same (as kubectl and aws
do). A subcommand's parser declares them with SUPPRESS defaults: given after the
subcommand they override the top parser's value, absent they leave it alone.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from reservoir.client.discovery import default_state_dir

from .output import EXIT_ERROR

Handler = Callable[[argparse.Namespace], None]


def _global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--master",
        metavar="HOST:PORT[,HOST:PORT...]",
        default=default(None),
        help="master address, or several masters' comma-separated (default: "
        "$RESERVOIR_MASTER, else the local cluster of --state-dir, else 127.0.0.1:19998)",
    )
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        type=Path,
        default=default(default_state_dir()),
        help="the local cluster's state directory (default: $RESERVOIR_STATE_DIR, else "
        "~/.reservoir)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="machine-readable output: one JSON document on stdout",
    )


class CommandParser(argparse.ArgumentParser):
    """A parser whose usage errors are like every other error of the CLI: one line on
    stderr, exit code 1 (argparse's own print the whole usage first and exit with 2),
    with the closest option or subcommand when one was mistyped. Subcommand parsers are
    made of the same class, so `reservoir local up --bad` is too."""

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            # Said by the parser of the subcommand they came with: its options are the
            # ones the user meant.
            deepest: CommandParser = getattr(parsed, _DEEPEST, self)
            deepest.error(f"unrecognized arguments: {' '.join(extras)}")
        if hasattr(parsed, _DEEPEST):
            delattr(parsed, _DEEPEST)
        return parsed

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if not hasattr(parsed, _DEEPEST):  # the innermost subcommand's parser finishes first
            setattr(parsed, _DEEPEST, self)
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self._with_suggestion(message)} (see `{self.prog} --help`)\n")

    def _with_suggestion(self, message: str) -> str:
        """The message, with '; did you mean --json?' for an unknown option or subcommand
        close to one (and then without the list of every subcommand)."""
        line = f"{self.prog}: error: {message}"
        choice = re.search(r"(invalid choice: '([^']*)') \(choose from (.*)\)", message)
        if choice:
            close = difflib.get_close_matches(choice[2], re.findall(r"'([^']*)'", choice[3]), 1)
            if close:
                kept = message[: choice.start()] + choice[1]
                return f"{self.prog}: error: {kept}; did you mean {close[0]}?"
            return line
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown:
            options = [o for action in self._actions for o in action.option_strings]
            for word in unknown[1].split():
                close = difflib.get_close_matches(word.split("=", 1)[0], options, 1)
                if word.startswith("-") and close:
                    return f"{line}; did you mean {close[0]}?"
        return line


# Where a parse remembers the innermost subcommand parser it went through.
_DEEPEST = "_reservoir_parser"


def top_parser(prog: str, description: str, version: str) -> argparse.ArgumentParser:
    parser = CommandParser(prog=prog, description=description)
    parser.add_argument(
        "--version", action="version", version=f"{prog} {version}", help="print the version"
    )
    _global_options(parser, defaults=True)
    return parser


class Subcommands:
    """One level of subcommands (`reservoir X`, `reservoir local X`)."""

    def __init__(self, parser: argparse.ArgumentParser, dest: str, common: argparse.ArgumentParser):
        self._action = parser.add_subparsers(dest=dest, required=True, metavar=dest.upper())
        self._action.help = "one of the subcommands below"  # type: ignore[attr-defined]
        self._common = common

    @classmethod
    def of(cls, parser: argparse.ArgumentParser) -> Subcommands:
        common = argparse.ArgumentParser(add_help=False)
        _global_options(common, defaults=False)
        return cls(parser, "command", common)

    def add(
        self, name: str, help: str, handler: Handler | None = None, *, short_help: bool = True
    ) -> argparse.ArgumentParser:
        """`short_help=False`: `--help` only, leaving `-h` to the command (`ls -lh`)."""
        parser: argparse.ArgumentParser = self._action.add_parser(
            name, help=help, description=help, parents=[self._common], add_help=short_help
        )
        if not short_help:
            parser.add_argument("--help", action="help", help="show this help message and exit")
        if handler is not None:
            parser.set_defaults(func=handler)
        return parser

    def group(self, name: str, help: str) -> Subcommands:
        """A subcommand with subcommands of its own (`reservoir local up`)."""
        return Subcommands(self.add(name, help), "action", self._common)
