"""Where log events go.

Every module logs structured events (an event name and fields) through `get_logger`, a
structlog logger over the standard library's `logging`, never through structlog's default
configuration (which prints to stdout). So:

- as a library (the SDK inside someone's training job), Reservoir is quiet unless the
  application configures `logging`: the `reservoir` logger has a `NullHandler`, Python's
  convention for libraries. An application that does configure logging sees our events
  under `reservoir.*` loggers, rendered `event key=value …` by any plain formatter;
- a Reservoir process (servers, the CLI) calls `configure_output` once at start: one
  handler, on stderr, rendering every record — ours and third-party ones — as console
  text or JSON lines, at the level `RESERVOIR_LOG_LEVEL` says.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from reservoir.common.config import LogConfig, warn_unknown_names

ROOT = "reservoir"
# Libraries whose debug logs carry request headers (Authorization) and bodies: kept at
# `LogConfig.third_party_level` whatever our own level is.
THIRD_PARTY = ("botocore", "boto3", "urllib3", "s3transfer")

logging.getLogger(ROOT).addHandler(logging.NullHandler())


class LogEvent(dict[str, Any]):
    """A structured event as a `logging` message: a plain formatter prints it as
    `event key=value …`; our formatter renders its fields (console or JSON)."""

    def __str__(self) -> str:
        fields = " ".join(f"{k}={v}" for k, v in self.items() if k not in ("event", "level"))
        return f"{self.get('event', '')} {fields}".rstrip()


def _as_record(_: Any, method: str, event: MutableMapping[str, Any]) -> Any:
    # What structlog.stdlib.ProcessorFormatter.wrap_for_formatter does, with a message a
    # plain formatter can print too.
    return (LogEvent(event),), {"extra": {"_logger": None, "_name": method}}


_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,
    structlog.processors.format_exc_info,
    _as_record,
]


def get_logger(name: str) -> Any:
    """The logger of a module (pass `__name__`, a `reservoir.*` name)."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=_PROCESSORS,
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    # Every process comes through here once: a misspelt variable is named where its
    # operator looks, instead of being ignored.
    warn_unknown_names(get_logger(__name__))


def configure_output(config: LogConfig, processors: list[Any] | None = None) -> None:
    """Sends every log record of this process to stderr, rendered as `config` says.

    For processes (servers, the CLI), never for library code. `processors` run on every
    event before it is rendered (e.g. adding trace ids)."""
    level = getattr(logging, config.level.upper(), logging.INFO)
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if config.format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        *(processors or []),
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name],
            processors=[
                *shared,
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    third_party = getattr(logging, config.third_party_level.upper(), logging.WARNING)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(third_party)
    # Code that asks structlog itself for a logger goes the same way, not to stdout.
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, _as_record],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    # Every process comes through here once: a misspelt variable is named where its
    # operator looks, instead of being ignored.
    warn_unknown_names(get_logger(__name__))
