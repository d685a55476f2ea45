"""`reservoir scheduler-extender` and `reservoir admission-webhook`: the two servers that
place pods near their datasets' cached bytes, in the foreground until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from reservoir.cli.subcommands import Subcommands
from reservoir.client import discovery
from reservoir.common import config as cfg
from reservoir.common import logs


def register(commands: Subcommands) -> None:
    """Registers both servers on the CLI's subcommands."""
    p = commands.add(
        "scheduler-extender",
        "serve the kube-scheduler extender protocol: /prioritize scores nodes 0-10 by the "
        "bytes of a pod's datasets (annotation reservoir.io/datasets: a,b) they hold; "
        "/filter keeps only nodes holding enough of them for pods annotated "
        "reservoir.io/locality: required",
        cmd_extender,
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="where to serve (default: $RESERVOIR_EXTENDER_LISTEN, else 0.0.0.0:8890)",
    )
    p.add_argument(
        "--min-fraction",
        type=float,
        help="the share of a pod's datasets a node must hold when it is required "
        "(default: $RESERVOIR_LOCALITY_MIN_FRACTION, else 0.1)",
    )
    p = commands.add(
        "admission-webhook",
        "serve a mutating admission webhook (/mutate): pods naming datasets get preferred "
        "node affinity toward the nodes, zones and regions holding their bytes; pods "
        "annotated reservoir.io/fuse: /path get the node's FUSE mount there",
        cmd_webhook,
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="where to serve (default: $RESERVOIR_WEBHOOK_LISTEN, else 0.0.0.0:8443)",
    )
    p.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate")
    p.add_argument("--tls-key", metavar="FILE", help="the certificate's private key")


def _config(args: argparse.Namespace, **given: Any) -> cfg.SchedulingConfig:
    client = discovery.client_config(args.master, state_dir=args.state_dir)
    return cfg.load(cfg.SchedulingConfig, client=client, **given)


def cmd_extender(args: argparse.Namespace) -> None:
    config = _config(args, extender_listen=args.listen, min_fraction=args.min_fraction)
    logs.configure_output(cfg.load(cfg.LogConfig))
    _run(config, _serve_extender)


def cmd_webhook(args: argparse.Namespace) -> None:
    config = _config(args, webhook_listen=args.listen, tls_cert=args.tls_cert, tls_key=args.tls_key)
    logs.configure_output(cfg.load(cfg.LogConfig))
    _run(config, _serve_webhook)


def _run(
    config: cfg.SchedulingConfig, serve: Callable[[cfg.SchedulingConfig], Awaitable[None]]
) -> None:
    try:
        import aiohttp  # noqa: F401
    except ImportError as exc:  # the client-only install
        raise ValueError(
            "this command needs aiohttp: pip install 'reservoir-cache[server]'"
        ) from exc

    from reservoir.common.serving import servers

    servers.serve_in_foreground(lambda: serve(config))


async def _serve_extender(config: cfg.SchedulingConfig) -> None:
    from reservoir.client.async_client import AsyncClient

    from .extender import SchedulerExtender
    from .http_serving import serve
    from .locality_lookup import LocalityLookup

    async with AsyncClient(config=_bounded(config)) as client:
        lookup = LocalityLookup(
            lambda name: client.locality(dataset=name), config.locality_timeout_s
        )
        app = SchedulerExtender(lookup, config.min_fraction).app()
        await serve(app, config.extender_listen, name="extender")


async def _serve_webhook(config: cfg.SchedulingConfig) -> None:
    from reservoir.client.async_client import AsyncClient

    from .admission import AdmissionWebhook
    from .http_serving import serve
    from .locality_lookup import LocalityLookup

    async with AsyncClient(config=_bounded(config)) as client:
        lookup = LocalityLookup(
            lambda name: client.locality(dataset=name), config.locality_timeout_s
        )
        webhook = AdmissionWebhook(lookup, config.affinity_nodes, config.fuse_host_path)
        await serve(
            webhook.app(),
            config.webhook_listen,
            name="webhook",
            tls_cert=config.tls_cert,
            tls_key=config.tls_key,
        )


def _bounded(config: cfg.SchedulingConfig) -> cfg.ClientConfig:
    """The client's own RPC deadline no longer than an answer may wait."""
    client = config.client
    return dataclasses.replace(
        client, rpc_timeout_s=min(client.rpc_timeout_s, config.locality_timeout_s)
    )
