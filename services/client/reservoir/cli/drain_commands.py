"""Taking a worker out of service without losing its cache: `drain`, `undrain`."""

from __future__ import annotations

import argparse
import sys
import time

from reservoir.client import Client
from reservoir.client.load_jobs import LoadJob
from reservoir.common.config import parse_duration
from reservoir.common.errors import DeadlineExceeded

from .connection import open_client
from .job_commands import Progress, job_dict
from .output import EXIT_ERROR, emit
from .subcommands import Subcommands

_POLL_S = 0.25


def cmd_drain(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        job = rs.drain(args.worker)
        if not args.wait:
            emit(
                args,
                job_dict(job),
                lambda: (
                    f"draining worker {job.worker}: job {job.id} "
                    f"(follow it with `reservoir job show {job.id}`)"
                ),
            )
            return
        final = _wait(rs, job, parse_duration(args.timeout) if args.timeout else None, args)
    emit(args, job_dict(final), lambda: f"worker {final.worker}: drain {final.state}")
    if not final.succeeded:
        for error in final.errors:
            print(f"  {error}", file=sys.stderr)
        sys.exit(EXIT_ERROR)


def _wait(rs: Client, job: LoadJob, timeout_s: float | None, args: argparse.Namespace) -> LoadJob:
    """The job once it ended; past `timeout_s`, DeadlineExceeded (the drain goes on)."""
    progress = None if args.json else Progress()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        if progress is not None:
            progress.job(job)
        if job.finished:
            return job
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineExceeded(
                f"drain of {job.worker} not done after {args.timeout} "
                f"({job.done_blocks}/{job.total_blocks} blocks); it goes on: "
                f"`reservoir job show {job.id}`, or `reservoir undrain {job.worker}`"
            )
        time.sleep(_POLL_S)
        job = rs.job(job.id)


def cmd_undrain(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        job = rs.undrain(args.worker)
    emit(args, job_dict(job), lambda: f"worker {args.worker} is serving again")


def register(commands: Subcommands) -> None:
    p = commands.add(
        "drain",
        "take a worker out of service keeping its cache: its blocks are copied to their "
        "next homes while it still serves, then it is marked drained and may be stopped",
        cmd_drain,
    )
    p.add_argument("worker", help="the worker's id (see `reservoir workers`)")
    p.add_argument(
        "--wait", action="store_true", help="show progress until the drain ends; exit 1 unless done"
    )
    p.add_argument(
        "--timeout", metavar="DURATION", help="with --wait: give up waiting after this (e.g. 5m)"
    )
    p = commands.add("undrain", "stop a worker's drain and put it back in service", cmd_undrain)
    p.add_argument("worker", help="the worker's id")
