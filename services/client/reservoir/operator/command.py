"""`reservoir operator`: the Dataset operator in the foreground until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse

from reservoir.cli.subcommands import Subcommands
from reservoir.client import discovery
from reservoir.common import config as cfg
from reservoir.common import logs

log = logs.get_logger(__name__)


def register(commands: Subcommands) -> None:
    """Registers `operator` on the CLI's subcommands."""
    p = commands.add(
        "operator",
        "run the Kubernetes operator: Dataset resources (reservoir.io/v1alpha1) are "
        "declared in the cluster, their status written back, and a deleted one released "
        "within $RESERVOIR_OPERATOR_FINALIZER_BUDGET even with the master gone",
        cmd_operator,
    )
    p.add_argument(
        "--namespace",
        help="watch Datasets in this namespace only (default: $RESERVOIR_OPERATOR_NAMESPACE, "
        "else every namespace)",
    )
    p.add_argument(
        "--liveness",
        metavar="URL",
        help="serve a liveness probe there, e.g. http://0.0.0.0:8080/healthz (default: none)",
    )


def cmd_operator(args: argparse.Namespace) -> None:
    client_config = discovery.client_config(args.master, state_dir=args.state_dir)
    config = cfg.load(cfg.OperatorConfig, client=client_config, namespace=args.namespace)
    logs.configure_output(cfg.load(cfg.LogConfig))
    run(config, liveness=args.liveness)


def run(config: cfg.OperatorConfig, *, liveness: str | None = None) -> None:
    try:
        import kopf
    except ImportError as exc:
        raise ValueError(
            "`reservoir operator` needs kopf: pip install 'reservoir-cache[operator]'"
        ) from exc
    from .kopf_wiring import operator_client, registry

    with operator_client(config) as client:
        where: dict[str, object] = (
            {"namespaces": [config.namespace]} if config.namespace else {"clusterwide": True}
        )
        log.info("operator_starting", master=config.client.master, **where)
        kopf.run(
            registry=registry(config, client),
            standalone=True,  # one replica (Deployment strategy Recreate): no peering CRD
            liveness_endpoint=liveness,
            **where,  # type: ignore[arg-type]
        )
