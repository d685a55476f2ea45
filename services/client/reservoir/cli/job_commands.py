"""Warm-up: `load`, `load-metadata`, `jobs`, `job`, with progress on stderr."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from typing import TYPE_CHECKING, Any

from reservoir.client.load_jobs import JobState, LoadJob, MetadataLoadProgress
from reservoir.common.errors import InvalidArgument

from .connection import open_client
from .output import (
    EXIT_ERROR,
    Table,
    duration_text,
    emit,
    fields,
    human,
    iso_time,
    time_fields,
)
from .subcommands import Subcommands

if TYPE_CHECKING:
    from reservoir.client import Client


def job_dict(job: LoadJob) -> dict[str, Any]:
    """A job as `--json` prints it: every field, and its times in ISO 8601 as well."""
    data = dataclasses.asdict(job)
    data["state"] = job.state.value
    data["priority_paths"] = list(job.priority_paths)
    data["errors"] = list(job.errors)
    data |= time_fields("created", job.created_ms) | time_fields("updated", job.updated_ms)
    return data


def _percent(done: int, total: int) -> str:
    return f"{100.0 * done / total:.1f}%" if total else "-"


def progress_line(job: LoadJob) -> str:
    """One line of `load --wait` progress: the share of bytes cached, and the time left
    at the byte rate since the job started (or, once it ended, the time it took)."""
    percent = f"{math.floor(100 * job.fraction_done)}%"
    line = f"{job.state.value:9} {percent:>4}  {human(job.done_bytes)} of {human(job.total_bytes)}"
    if job.finished:
        line += f" in {duration_text(job.elapsed_s)}"
    else:
        eta = job.eta_s
        line += f", ETA {duration_text(eta) if eta is not None else '-'}"
    rate = job.bytes_per_second
    return (
        f"{line}  ({job.done_blocks}/{job.total_blocks} blocks, {job.failed_blocks} failed,"
        f" {job.total_files} files{f', {human(rate)}/s' if rate else ''})"
    )


class Progress:
    """A live line on a terminal's stderr; plain lines (at most one a second) otherwise."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()
        self._last = 0.0

    def job(self, job: LoadJob) -> None:
        self._show(progress_line(job), final=job.finished)

    def metadata(self, p: MetadataLoadProgress) -> None:
        self._show(str(p), final=p.done)

    def _show(self, line: str, final: bool) -> None:
        now = time.monotonic()
        if self._tty:
            sys.stderr.write("\r\x1b[2K" + line + ("\n" if final else ""))
            sys.stderr.flush()
        elif final or now - self._last >= 1.0:
            print(line, file=sys.stderr, flush=True)
            self._last = now


def job_text(job: LoadJob) -> str:
    lines = fields(
        [
            ("id", job.id),
            ("kind", job.kind if job.kind == "load" else f"{job.kind} of worker {job.worker}"),
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
            priority_paths=args.priority or (),
            metadata_only=args.metadata_only,
            files=_named_files(args.files_from),
        )
        if not args.wait:
            emit(args, job_dict(job), lambda: f"submitted load job {job.id} for {job.path}")
            return
        progress = Progress()
        final = rs.watch_job(job.id, progress=None if args.json else progress.job)
    emit(args, job_dict(final), lambda: f"job {final.id}: {final.state}")
    if not final.succeeded:
        for error in final.errors:
            print(f"  {error}", file=sys.stderr)
        sys.exit(EXIT_ERROR)


def _named_files(source: str | None) -> list[str]:
    """The paths listed in `source` (one a line; '-' is stdin), blank lines left out.
    A list naming none is refused: to the master no list means every file below the
    path, the opposite of what an empty list asks for."""
    if source is None:
        return []
    if source == "-":
        lines = sys.stdin.read().splitlines()
    else:
        with open(source, encoding="utf-8") as f:
            lines = f.read().splitlines()
    named = [line.strip() for line in lines if line.strip()]
    if not named:
        where = "stdin" if source == "-" else source
        raise InvalidArgument(f"--files-from {where} lists no files: nothing to load")
    return named


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
                j.path if j.kind == "load" else f"({j.kind} of worker {j.worker})",
            )
        return table.render(empty="(no load jobs)")

    emit(args, [job_dict(j) for j in jobs], text)


def cmd_job(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        job = _cancel(rs, args.id) if args.action == "cancel" else rs.job(args.id)
    emit(args, job_dict(job), lambda: job_text(job))


def _cancel(rs: Client, job_id: str) -> LoadJob:
    """Cancels a job that still runs. The master returns a finished job as it was, which
    would read as cancelled by this command: a finished one is an error that says so."""
    job = rs.job(job_id)
    if not job.finished:
        job = rs.cancel_job(job_id)
        if job.state is JobState.CANCELLED:
            return job
    raise InvalidArgument(
        f"job {job_id} already finished ({job.state.value}{_when(job)}): nothing to cancel"
    )


def _when(job: LoadJob) -> str:
    return f" at {iso_time(job.updated_ms)}" if job.updated_ms else ""


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
        dataclasses.asdict(last),
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
        "--files-from",
        metavar="FILE",
        help="load only the files listed in FILE (one path a line, '-' for stdin), each "
        "below PATH (a relative one names a file below PATH), in that order: the way to "
        "load from a store that cannot list (http)",
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
