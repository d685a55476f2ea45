"""Warm-up: `load`, `load-metadata`, `jobs`, `job`, with progress on stderr."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .connection import open_client
from .output import EXIT_ERROR, Table, emit, fields, human, iso_time, iso_time_or_none, message_dict
from .subcommands import Subcommands

_FINAL_STATES = ("completed", "failed", "cancelled")


def job_dict(job: Any) -> dict[str, Any]:
    data = message_dict(job)
    data["created"] = iso_time_or_none(job.created_ms)
    data["updated"] = iso_time_or_none(job.updated_ms)
    return data


def _percent(done: int, total: int) -> str:
    return f"{100.0 * done / total:.1f}%" if total else "-"


class Progress:
    """A live line on a terminal's stderr; plain lines (at most one a second) otherwise."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()
        self._start = time.monotonic()
        self._last = 0.0

    def job(self, job: Any) -> None:
        elapsed = max(time.monotonic() - self._start, 1e-6)
        rate = job.done_bytes / elapsed
        left = max(job.total_bytes - job.done_bytes, 0)
        eta = f"{left / rate:.0f}s" if rate > 0 and left else "-"
        line = (
            f"{job.state:9} {_percent(job.done_blocks, job.total_blocks):>6}"
            f"  blocks {job.done_blocks}/{job.total_blocks}"
            f" ({job.failed_blocks} failed)  files {job.total_files}"
            f"  {human(job.done_bytes)}/{human(job.total_bytes)}  {human(rate)}/s  eta {eta}"
        )
        self._show(line, final=job.state in _FINAL_STATES)

    def metadata(self, p: Any) -> None:
        self._show(
            f"metadata: listed {p.listed}  written {p.written}  removed {p.removed}"
            f"  {p.elapsed_ms / 1000:.1f}s",
            final=p.done,
        )

    def _show(self, line: str, final: bool) -> None:
        now = time.monotonic()
        if self._tty:
            sys.stderr.write("\r\x1b[2K" + line + ("\n" if final else ""))
            sys.stderr.flush()
        elif final or now - self._last >= 1.0:
            print(line, file=sys.stderr, flush=True)
            self._last = now


def job_text(job: Any) -> str:
    lines = fields(
        [
            ("id", job.id),
            ("path", job.path),
            ("state", job.state),
            ("replicas", job.replicas),
            ("metadata only", "yes" if job.metadata_only else "no"),
            ("priority paths", ", ".join(job.priority_paths)),
            ("files", job.total_files),
            (
                "blocks",
                f"{job.done_blocks}/{job.total_blocks} ({job.failed_blocks} failed, "
                f"{_percent(job.done_blocks, job.total_blocks)})",
            ),
            ("bytes", f"{human(job.done_bytes)}/{human(job.total_bytes)}"),
            ("created", iso_time(job.created_ms)),
            ("updated", iso_time(job.updated_ms)),
            ("attempts", job.attempts),
        ]
    )
    errors = "".join(f"\n  {e}" for e in job.errors)
    return lines + (f"\nerrors:{errors}" if errors else "")


def cmd_load(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        job = rs.submit_load(
            args.path,
            replicas=args.replicas,
            priority_paths=args.priority or [],
            metadata_only=args.metadata_only,
        )
        if not args.wait:
            emit(args, job_dict(job), lambda: f"submitted load job {job.id} for {job.path}")
            return
        progress = Progress()
        final = rs.watch_job(job.id, progress=None if args.json else progress.job)
    emit(args, job_dict(final), lambda: f"job {final.id}: {final.state}")
    if final.state != "completed":
        for error in final.errors:
            print(f"  {error}", file=sys.stderr)
        sys.exit(EXIT_ERROR)


def cmd_jobs(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        jobs = rs.jobs()

    def text() -> str:
        table = Table(
            "ID", "STATE", "DONE", "BLOCKS", "BYTES", "CREATED", "PATH", numeric=("DONE", "BLOCKS")
        )
        for j in jobs:
            table.row(
                j.id,
                j.state,
                _percent(j.done_blocks, j.total_blocks),
                f"{j.done_blocks}/{j.total_blocks}",
                f"{human(j.done_bytes)}/{human(j.total_bytes)}",
                iso_time(j.created_ms),
                j.path,
            )
        return table.render(empty="(no load jobs)")

    emit(args, [job_dict(j) for j in jobs], text)


def cmd_job(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        job = rs.cancel_job(args.id) if args.action == "cancel" else rs.job(args.id)
    emit(args, job_dict(job), lambda: job_text(job))


def cmd_load_metadata(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        progress = Progress()
        last = rs.load_metadata(
            args.path,
            recursive=not args.no_recursive,
            progress=None if args.json else progress.metadata,
        )
    emit(
        args,
        message_dict(last),
        lambda: f"{args.path}: {last.listed} entries in {last.elapsed_ms / 1000:.1f}s",
    )


def register(commands: Subcommands) -> None:
    p = commands.add("load", "preload a path into the cache (a load job)", cmd_load)
    p.add_argument("path", help="the file or directory to load")
    p.add_argument(
        "--replicas", type=int, default=1, help="workers that cache each block (default 1)"
    )
    p.add_argument(
        "--priority", action="append", metavar="PATH", help="load these first (repeatable)"
    )
    p.add_argument(
        "--metadata-only", action="store_true", help="only sync the namespace, load no data"
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="show progress on stderr until the job ends; exit 1 unless it completed",
    )
    p = commands.add(
        "load-metadata",
        "sync the namespace below a path from the under-store now (files added since the "
        "last listing show up)",
        cmd_load_metadata,
    )
    p.add_argument("path", help="the directory (or file) to sync")
    p.add_argument(
        "--no-recursive", action="store_true", help="this directory level only, not below"
    )
    commands.add("jobs", "list load jobs", cmd_jobs)
    p = commands.add("job", "show or cancel a load job", cmd_job)
    p.add_argument("action", choices=["show", "cancel"], help="show it, or cancel it")
    p.add_argument("id", help="the job's id (see `reservoir jobs`)")
