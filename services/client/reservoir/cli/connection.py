"""Which cluster a command talks to, and the client it talks through."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from reservoir.common import config as cfg

if TYPE_CHECKING:
    from reservoir.client import Client


def default_state_dir() -> Path:
    return Path(os.environ.get("RESERVOIR_STATE_DIR") or Path.home() / ".reservoir")


def master_address(args: argparse.Namespace) -> str:
    if args.master:
        return str(args.master)
    if os.environ.get("RESERVOIR_MASTER"):
        return os.environ["RESERVOIR_MASTER"]
    from reservoir.local.cluster import LocalCluster

    return LocalCluster.load(Path(args.state_dir)).master_address


def open_client(args: argparse.Namespace) -> Client:
    from reservoir.client import Client

    config = cfg.load(cfg.ClientConfig, master=master_address(args))
    if not (config.security.tls_ca or config.security.token or config.security.token_file):
        # A local cluster started with --secure: its CA and admin token, no flags needed.
        from reservoir.local.cluster import ClusterError, LocalCluster

        try:
            local = LocalCluster.load(Path(args.state_dir))
        except ClusterError:
            local = None
        if local is not None and local.master_address == config.master:
            config = cfg.ClientConfig(**{**config.__dict__, "security": local.security("admin")})
    return Client(config=config)
