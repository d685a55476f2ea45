"""`reservoir config`: the settings a process would run with, and where each came from."""

from __future__ import annotations

import argparse
import os
from typing import Any

from reservoir.client.discovery import client_config
from reservoir.common import config as cfg

from .output import Table, emit
from .subcommands import Subcommands

# Whose settings: the CLI's and SDK's own, or what a server started here would read.
COMPONENTS: dict[str, type] = {
    "client": cfg.ClientConfig,
    "master": cfg.MasterConfig,
    "worker": cfg.WorkerConfig,
    "fuse": cfg.FuseConfig,
    "gateway": cfg.GatewayConfig,
    "operator": cfg.OperatorConfig,
    "scheduling": cfg.SchedulingConfig,
    "log": cfg.LogConfig,
}


def _shown(setting: cfg.Setting) -> Any:
    if setting.secret:
        return "(set)" if setting.value else ""
    return setting.value


def cmd_config(args: argparse.Namespace) -> None:
    if args.component == "client":
        settings: Any = client_config(args.master, state_dir=args.state_dir)
        # Beyond the environment, only the master and its CA/token are found for the
        # client: from --master, or from the local cluster of --state-dir.
        given = "--master" if args.master else f"local cluster ({args.state_dir}/cluster.json)"
    elif args.component in ("gateway", "scheduling"):
        # The master it would really use: found as `reservoir gateway` finds it.
        client = client_config(args.master, state_dir=args.state_dir)
        settings = cfg.load(COMPONENTS[args.component], client=client)
        given = "--master" if args.master else f"local cluster ({args.state_dir}/cluster.json)"
    else:
        settings = cfg.load(COMPONENTS[args.component])
        given = "given"
    rows = cfg.explain(settings)
    data = [
        {
            "name": s.name,
            "setting": s.attribute,
            "value": _shown(s),
            "source": given if s.source == cfg.GIVEN else s.source,
        }
        for s in rows
    ]
    # Set but read by nothing (a typo, most likely): shown with the closest known name.
    data.extend(
        {
            "name": name,
            "setting": None,
            "value": os.environ[name],
            "source": "unknown" + (f" (did you mean {closest}?)" if closest else ""),
        }
        for name, closest in cfg.unknown_names().items()
    )

    def text() -> str:
        table = Table("NAME", "VALUE", "SOURCE")
        for item in data:
            table.row(item["name"], item["value"], item["source"])
        return table.render()

    emit(args, data, text)


def register(commands: Subcommands) -> None:
    p = commands.add(
        "config",
        "print the effective settings (RESERVOIR_* variables) and where each came from",
        cmd_config,
    )
    p.add_argument(
        "component",
        nargs="?",
        default="client",
        choices=sorted(COMPONENTS),
        help="whose settings: the client's (default; the CLI and SDK), or those a master, "
        "worker, FUSE mount or log output started here would use",
    )
