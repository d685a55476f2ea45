"""`reservoir locality`: where a path's (or a dataset's) cached bytes are, per host and
zone — what the scheduler extender and the admission webhook place pods by."""

from __future__ import annotations

import argparse
import dataclasses

from .connection import open_client
from .output import Table, emit, human
from .subcommands import Subcommands


def cmd_locality(args: argparse.Namespace) -> None:
    if bool(args.path) == bool(args.dataset):
        raise ValueError("give either a PATH or --dataset NAME")
    with open_client(args) as rs:
        found = rs.locality(args.path or "", dataset=args.dataset or "")
    data = dataclasses.asdict(found) | {"cached_fraction": found.cached_fraction}
    data["hosts"] = [
        dataclasses.asdict(h) | {"fraction": found.host_fraction(h.host)} for h in found.hosts
    ]

    def text() -> str:
        lines = [
            f"{found.path}: {found.files} files, {human(found.bytes)}; cached "
            f"{human(found.cached_bytes)} ({100 * found.cached_fraction:.1f}%)",
            "",
        ]
        hosts = Table("HOST", "ZONE", "REGION", "CACHED", "OF PATH", numeric=("CACHED", "OF PATH"))
        for h in found.hosts:
            hosts.row(
                h.host,
                h.zone,
                h.region,
                human(h.bytes),
                f"{100 * found.host_fraction(h.host):.1f}%",
            )
        lines.append(hosts.render(empty="(nothing cached on any host)"))
        if any(found.zones) and found.zones:
            zones = Table("ZONE", "CACHED", numeric=("CACHED",))
            for name, count in found.zones.items():
                zones.row(name or "-", human(count))
            lines += ["", zones.render()]
        return "\n".join(lines)

    emit(args, data, text)


def register(commands: Subcommands) -> None:
    p = commands.add(
        "locality",
        "bytes of a path (or a declared dataset) cached per host and zone, from the "
        "master's block-location table",
        cmd_locality,
    )
    p.add_argument("path", nargs="?", help="the file or directory")
    p.add_argument("--dataset", metavar="NAME", help="a declared dataset instead of a path")
