"""Cache rules: `pin`, `unpin`, `ttl`, `rules`, `free`."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from reservoir.common.models import CacheRule

from .connection import open_client
from .job_commands import job_dict
from .output import EXIT_ERROR, Table, emit, human, time_fields
from .subcommands import Subcommands


def rule_dict(rule: CacheRule) -> dict[str, Any]:
    return {
        "path": rule.path,
        "mount_path": rule.mount_path,
        "ufs_prefix": rule.ufs_prefix,
        "pinned": rule.pinned,
        "pinned_files": rule.pinned_files,
        "pinned_bytes": rule.pinned_bytes,
        "ttl_s": rule.ttl_ms / 1000 if rule.ttl_ms else None,
        **time_fields("updated", rule.updated_ms),
    }


def _rule_summary(r: dict[str, Any]) -> str:
    parts = []
    if r["pinned"]:
        parts.append(f"pinned ({r['pinned_files']} files, {human(r['pinned_bytes'])})")
    if r["ttl_s"]:
        parts.append(f"ttl {r['ttl_s']:g}s")
    return f"{r['path']}: {', '.join(parts) or 'no pin, no TTL'}"


def cmd_pin(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        pinned = rs.pin(args.path)
        job = rs.watch_job(pinned.load_job_id) if args.wait else None
    data = rule_dict(pinned.rule) | {"load_job_id": pinned.load_job_id}
    if job is not None:
        data["load_job"] = job_dict(job)

    def text() -> str:
        line = f"{_rule_summary(data)}; loading in job {pinned.load_job_id}"
        if job is not None:
            line += f" ({job.state}: {job.done_blocks}/{job.total_blocks} blocks)"
        return line

    emit(args, data, text)
    if job is not None and not job.succeeded:
        sys.exit(EXIT_ERROR)


def cmd_unpin(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        rule = rs.unpin(args.path)
    emit(args, rule_dict(rule), lambda: f"unpinned {rule.path}")


def cmd_ttl(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        if args.action == "set":
            if not args.duration:
                raise ValueError("ttl set needs a DURATION, e.g. 6h")
            rule = rs.set_ttl(args.path, args.duration)
        else:
            rule = rs.clear_ttl(args.path)
    data = rule_dict(rule)
    emit(args, data, lambda: _rule_summary(data))


def cmd_rules(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        rules = rs.cache_rules()
    data = [rule_dict(r) for r in rules]

    def text() -> str:
        table = Table(
            "PATH", "PINNED", "FILES", "BYTES", "TTL", "UPDATED", numeric=("FILES", "BYTES")
        )
        for r in data:
            table.row(
                r["path"],
                "yes" if r["pinned"] else "no",
                r["pinned_files"] if r["pinned"] else "-",
                human(r["pinned_bytes"]) if r["pinned"] else "-",
                f"{r['ttl_s']:g}s" if r["ttl_s"] else "-",
                r["updated"],
            )
        return table.render(empty="(no pins or TTLs)")

    emit(args, data, text)


def cmd_free(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        freed = rs.free(args.path)
    kept = " (unpin first)" if freed.pinned_files else ""
    emit(args, dataclasses.asdict(freed), lambda: f"{freed}{kept}")


def register(commands: Subcommands) -> None:
    p = commands.add(
        "pin", "keep a path's files in the cache, never evicted (and load them now)", cmd_pin
    )
    p.add_argument("path", help="the file or directory to pin")
    p.add_argument("--wait", action="store_true", help="wait until they are loaded")
    p = commands.add("unpin", "let a pinned path's files be evicted again", cmd_unpin)
    p.add_argument("path", help="the pinned path")
    p = commands.add(
        "ttl",
        "cached blocks below a path (a mount path: the whole mount) expire DURATION "
        "after they landed: read again from the under-store, evicted first",
        cmd_ttl,
    )
    p.add_argument("action", choices=["set", "clear"], help="set or clear the TTL")
    p.add_argument("path", help="the path the TTL applies below")
    p.add_argument("duration", nargs="?", help="for set: e.g. 90s, 30m, 6h, 7d")
    commands.add("rules", "list pins and TTLs", cmd_rules)
    p = commands.add("free", "evict a path's blocks from every worker now", cmd_free)
    p.add_argument("path", help="the file or directory to evict")
