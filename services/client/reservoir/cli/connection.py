"""Which cluster a command talks to, and the client it talks through: the same search as
`Client()` (reservoir.client.discovery), with --master and --state-dir as its arguments."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from reservoir.client import discovery
from reservoir.common.config import ClientConfig

if TYPE_CHECKING:
    from reservoir.client import Client


def client_config(args: argparse.Namespace) -> ClientConfig:
    return discovery.client_config(args.master, state_dir=args.state_dir)


def open_client(args: argparse.Namespace) -> Client:
    from reservoir.client import Client

    return Client(config=client_config(args))


def unreachable_hint(args: argparse.Namespace) -> str:
    """Why the CLI dialled the address it did, when nothing told it which: said after an
    unreachable master, so `reservoir workers` with no cluster around says what to do."""
    if args.master or os.environ.get(discovery.MASTER_ENV):
        return ""
    if discovery.LocalClusterAddress.read(args.state_dir) is not None:
        return ""
    return (
        f"no --master, no ${discovery.MASTER_ENV} and no local cluster in {args.state_dir}, "
        "so the default address was tried: `reservoir local up` starts a local cluster"
    )
