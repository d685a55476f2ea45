"""`reservoir`: the command line.

Each module registers its own subcommands (`register(commands)`); this one puts the parser
together and runs the chosen command. Data goes to stdout, everything else (progress,
notes, logs, errors) to stderr; errors are one line with exit code 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib import metadata
from typing import NoReturn

import grpc

from reservoir.common import DISTRIBUTION, logs
from reservoir.common import config as cfg
from reservoir.common.errors import ReservoirError, Unavailable
from reservoir.common.rpc import error_from_rpc
from reservoir.fuse import command as fuse_command
from reservoir.gateway import command as gateway_command
from reservoir.k8s import command as k8s_command
from reservoir.operator import command as operator_command

from . import (
    cache_rule_commands,
    cluster_commands,
    completion_commands,
    config_commands,
    credential_commands,
    dataset_commands,
    drain_commands,
    job_commands,
    local_commands,
    locality_commands,
    namespace_commands,
    read_commands,
    write_commands,
)
from .connection import unreachable_hint
from .output import EXIT_ERROR
from .subcommands import Subcommands, top_parser

log = logs.get_logger(__name__)

# Every command module, in the order `reservoir --help` lists their subcommands.
REGISTRATIONS: tuple[Callable[[Subcommands], None], ...] = (
    local_commands.register,
    namespace_commands.register,
    read_commands.register,
    write_commands.register,
    job_commands.register,
    dataset_commands.register,
    cache_rule_commands.register,
    cluster_commands.register,
    locality_commands.register,
    drain_commands.register,
    credential_commands.register,
    config_commands.register,
    fuse_command.register,
    gateway_command.register,
    operator_command.register,
    k8s_command.register,
    completion_commands.register,
)


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = top_parser(
        "reservoir", "Reservoir: a distributed read cache for ML training.", version()
    )
    commands = Subcommands.of(parser)
    for register in REGISTRATIONS:
        register(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from reservoir.local.process import ClusterError

    # Data and results go to stdout; log lines only ever to stderr.
    logs.configure_output(cfg.load(cfg.LogConfig, defaults={"level": cfg.CLI_LOG_LEVEL}))

    try:
        args.func(args)
    except BrokenPipeError:
        sys.exit(0)
    except grpc.RpcError as exc:  # a call no layer below translated: never shown raw
        fail(args, error_from_rpc(exc, f"reservoir {args.command}"))
    except (ReservoirError, ClusterError, OSError, ValueError) as exc:
        fail(args, exc)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        # A bug: one line all the same, the traceback in the log for whoever debugs it.
        log.debug("cli_failed", exc_info=True)
        fail(args, f"internal error: {type(exc).__name__}: {exc} (a bug; "
             "RESERVOIR_LOG_LEVEL=debug logs its traceback)")  # fmt: skip


def fail(args: argparse.Namespace, error: BaseException | str) -> NoReturn:
    """The one line an error prints, and exit code 1."""
    hint = unreachable_hint(args) if isinstance(error, Unavailable) else ""
    print(f"reservoir: error: {error}" + (f"; {hint}" if hint else ""), file=sys.stderr)
    sys.exit(EXIT_ERROR)


if __name__ == "__main__":
    main()
