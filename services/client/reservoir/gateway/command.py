"""`reservoir gateway [--listen HOST:PORT]`: the S3 API in front of the cluster, in the
foreground until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import dataclasses

from reservoir.cli.subcommands import Subcommands
from reservoir.client import discovery
from reservoir.common import config as cfg
from reservoir.common import logs


def register(commands: Subcommands) -> None:
    """Registers `gateway` on the CLI's subcommands."""
    p = commands.add(
        "gateway",
        "serve the S3 API in front of the cluster: any S3 client reads through the cache "
        "(GetObject, HeadObject, ListObjects v1 and v2, ListBuckets...) and writes to "
        "writable mounts through it (PutObject, multipart uploads, CopyObject, "
        "DeleteObject(s)); every other S3 operation answers 501 NotImplemented",
        cmd_gateway,
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="where to serve (default: $RESERVOIR_GATEWAY_LISTEN, else 127.0.0.1:19900)",
    )
    p.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any free "
        "port; default: $RESERVOIR_METRICS_LISTEN, else none)",
    )
    p.add_argument(
        "--keys-file",
        metavar="FILE",
        help="check AWS Signature V4 against these keys (lines `ACCESS_KEY SECRET ROLE`, "
        "ROLE reader or writer; default: $RESERVOIR_GATEWAY_KEYS_FILE, else accept any)",
    )


def cmd_gateway(args: argparse.Namespace) -> None:
    client = discovery.client_config(args.master, state_dir=args.state_dir)
    metrics = cfg.load(cfg.MetricsSettings, listen=args.metrics_listen)
    config = cfg.load(
        cfg.GatewayConfig,
        client=client,
        listen=args.listen,
        keys_file=args.keys_file,
        metrics=metrics,
    )
    # In the foreground its events (serving, refused signatures) are what the operator
    # watches: at info.
    logs.configure_output(cfg.load(cfg.LogConfig))
    run(config)


def run(config: cfg.GatewayConfig) -> None:
    try:
        import aiohttp  # noqa: F401
    except ImportError as exc:  # the client-only install
        raise ValueError(
            "`reservoir gateway` needs aiohttp: pip install 'reservoir-cache[server]'"
        ) from exc
    from reservoir.common.serving import servers

    from .server import serve

    servers.serve_in_foreground(lambda: serve(config))


def main() -> None:
    """`python -m reservoir.gateway`: the settings from the environment alone (the local
    launcher, containers)."""
    logs.configure_output(cfg.load(cfg.LogConfig))
    client = discovery.client_config()
    run(dataclasses.replace(cfg.load(cfg.GatewayConfig), client=client))
