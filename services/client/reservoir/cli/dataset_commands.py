"""Declared datasets: `apply -f`, `datasets`, `dataset show|delete`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from reservoir.client import Dataset
from reservoir.client.datasets import document_of

from .connection import open_client
from .output import Table, emit, fields, human, iso_time
from .subcommands import Subcommands


def dataset_dict(d: Dataset) -> dict[str, Any]:
    return {
        "name": d.name,
        "generation": d.generation,
        "deleting": d.deleting,
        "created_ms": d.created_ms,
        "updated_ms": d.updated_ms,
        **d.document,
        "status": d.status,
    }


def _yaml(data: Any) -> str:
    import yaml

    return str(yaml.safe_dump(data, sort_keys=False))


def cmd_apply(args: argparse.Namespace) -> None:
    source = sys.stdin.read() if args.file == "-" else Path(args.file)
    document = document_of(source)
    with open_client(args) as rs:
        d = rs.apply_dataset(document)
    emit(args, dataset_dict(d), lambda: f"dataset/{d.name} applied (generation {d.generation})")


def cmd_datasets(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        found = rs.datasets()
    data = [dataset_dict(d) for d in found]
    if args.output == "yaml":
        print(_yaml(data), end="")
        return
    if args.output == "json":
        args.json = True

    def text() -> str:
        table = Table("NAME", "PATH", "SOURCE", "PHASE", "CACHED", "PRELOAD", "LAST SYNC")
        for d in found:
            spec = d.document["spec"]
            last = d.status.get("last_sync_ms", 0)
            table.row(
                d.name,
                spec["path"],
                spec["source"]["uri"],
                "Deleting" if d.deleting else d.phase,
                f"{d.cached_percent:.0f}%",
                spec["preload"]["policy"],
                iso_time(last) if last else "-",
            )
        return table.render(empty="(no datasets: `reservoir apply -f dataset.yaml`)")

    emit(args, data, text)


def cmd_dataset(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        if args.action == "delete":
            d = rs.delete_dataset(args.name, keep_cache=args.keep_cache)
            emit(args, dataset_dict(d), lambda: f"dataset/{d.name} deleting")
            return
        d = rs.dataset(args.name)
    if args.output == "yaml":
        print(_yaml(dataset_dict(d)), end="")
        return
    if args.output == "json":
        args.json = True
    emit(args, dataset_dict(d), lambda: _show(d))


def _show(d: Dataset) -> str:
    s, spec = d.status, d.document["spec"]
    quota = spec["cache"]["quota"]
    lines = fields(
        [
            ("name", d.name),
            ("path", spec["path"]),
            ("source", spec["source"]["uri"]),
            ("phase", "Deleting" if d.deleting else d.phase),
            ("generation", f"{d.generation} (status of {s.get('observed_generation', 0)})"),
            ("last sync", iso_time(s["last_sync_ms"]) if s.get("last_sync_ms") else "-"),
            ("files", s.get("files", 0)),
            (
                "cached",
                f"{human(s.get('cached_bytes', 0))} of {human(s.get('total_bytes', 0))} "
                f"({d.cached_percent:.1f}%)",
            ),
            (
                "quota",
                f"{human(s.get('cached_bytes', 0))} of {human(quota)} used" if quota else "none",
            ),
            ("preload", spec["preload"]["policy"]),
        ]
    )
    runs = s.get("runs", [])
    if runs:
        lines += "\npreload runs:" + "".join(
            f"\n  {r['job']} {r['trigger']} {iso_time(r['started_ms'])} {r['state']} "
            f"({human(r['done_bytes'])} of {human(r['total_bytes'])})"
            for r in runs
        )
    conditions = s.get("conditions", [])
    if conditions:
        lines += "\nconditions:" + "".join(
            f"\n  {c['type']}={'True' if c['status'] else 'False'}"
            + (f" {c['reason']}: {c['message']}" if c["reason"] else "")
            for c in conditions
        )
    return lines


def register(commands: Subcommands) -> None:
    p = commands.add(
        "apply",
        "declare a dataset (a Dataset document, YAML or JSON): the cluster mounts, syncs, "
        "preloads and keeps it; applying it again changes only what changed",
        cmd_apply,
    )
    p.add_argument("-f", "--file", required=True, help="the document's file, or - for stdin")
    output_help = "table (default), json, or yaml: the documents with their status"
    p = commands.add("datasets", "declared datasets and their phase", cmd_datasets)
    p.add_argument(
        "-o", "--output", choices=["table", "json", "yaml"], default="table", help=output_help
    )
    p = commands.add("dataset", "show or delete a declared dataset", cmd_dataset)
    p.add_argument("action", choices=["show", "delete"], help="show it, or delete it")
    p.add_argument("name", help="the dataset's name (metadata.name)")
    p.add_argument(
        "-o", "--output", choices=["table", "json", "yaml"], default="table", help=output_help
    )
    p.add_argument(
        "--keep-cache",
        action="store_true",
        help="with delete: leave its cached blocks (evicted as any others)",
    )
