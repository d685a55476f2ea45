"""`reservoir-master`: the master process."""

from __future__ import annotations

import argparse
import asyncio
import socket

from reservoir.common import config as cfg
from reservoir.common import logs, observability
from reservoir.common.malloc_tuning import tune_for_large_buffers
from reservoir.common.metadata.fenced_store import FencedStore
from reservoir.common.metadata.metadata_store import open_metadata_store
from reservoir.common.metadata.store_health import StoreHealthServicer
from reservoir.common.rpc import CHANNEL_OPTIONS
from reservoir.common.security import SecuritySettings, Transport
from reservoir.common.serving import servers
from reservoir.common.serving.metrics_endpoint import MetricsEndpoint, server_registry
from reservoir.common.serving.rpc_metrics import RpcMetrics
from reservoir.v1 import master_pb2, master_pb2_grpc

from .leader_duties import LeaderDuties
from .leader_gate import LeaderGate
from .leadership import Leadership
from .metrics import LeadershipMetrics, MasterMetrics
from .service import MasterService
from .servicer import MasterServicer

log = logs.get_logger(__name__)


def parse_args(argv: list[str] | None = None) -> tuple[cfg.MasterConfig, cfg.LogConfig]:
    parser = argparse.ArgumentParser(
        prog="reservoir-master",
        description="Reservoir master. Every flag has an environment variable (see README).",
    )
    parser.add_argument("--listen", help="host:port to serve gRPC on")
    parser.add_argument("--metadata-url", help="etcd://host:port or memory://")
    parser.add_argument(
        "--advertise", help="host:port the other masters name to callers (default: --listen)"
    )
    parser.add_argument("--block-size", type=cfg.parse_size)
    parser.add_argument("--log-format", choices=["console", "json"])
    parser.add_argument(
        "--metrics-listen", help="host:port to serve Prometheus /metrics on (port 0 = choose)"
    )
    args = parser.parse_args(argv)
    master = cfg.load(
        cfg.MasterConfig,
        listen=args.listen,
        metadata_url=args.metadata_url,
        advertise=args.advertise,
        default_block_size=args.block_size,
        metrics=cfg.load(cfg.MetricsSettings, listen=args.metrics_listen),
    )
    return master, cfg.load(cfg.LogConfig, format=args.log_format)


def _advertise(config: cfg.MasterConfig, port: int) -> str:
    if config.advertise:
        return config.advertise
    host = config.listen.rsplit(":", 1)[0]
    if host in ("0.0.0.0", "[::]", ""):
        host = socket.gethostname()
    return f"{host}:{port}"


async def serve(config: cfg.MasterConfig, transport: Transport) -> None:
    raw_store = open_metadata_store(
        config.metadata_url, config.metadata_timeout_s, config.etcd, config.metadata_page_keys
    )
    leadership = Leadership(raw_store, config.lease_ttl_s)
    # Every write of this master holds only while it leads.
    store = FencedStore(raw_store, leadership)
    registry = server_registry()
    service = MasterService(store, config, transport, registry)
    server = servers.new_server(
        "master", transport, RpcMetrics(registry), gates=[LeaderGate(leadership)]
    )
    collector = MasterMetrics(service, store)
    registry.register(collector)
    registry.register(LeadershipMetrics(leadership))
    metrics = MetricsEndpoint(registry, config.metrics, before_scrape=collector.refresh)
    master_pb2_grpc.add_MasterServiceServicer_to_server(MasterServicer(service, leadership), server)
    await servers.add_health_and_reflection(
        server,
        [master_pb2.DESCRIPTOR.services_by_name["MasterService"].full_name],
        StoreHealthServicer(service.metadata_health),
    )
    # Bound before campaigning: holding the port proves an earlier run at this address
    # is gone, so its leader key need not wait out its lease (see leadership.py).
    port = servers.bind(server, config.listen, transport)
    address = _advertise(config, port)
    campaign = asyncio.create_task(leadership.run(address, LeaderDuties(service, config)))
    # A master that can lead at once has its state loaded before it serves, as before.
    await leadership.first_outcome(config.metadata_timeout_s + config.lease_ttl_s)
    await server.start()
    await metrics.start()
    log.info(
        "master_started",
        listen=config.listen,
        port=port,
        address=address,
        role=leadership.role,
        leader=leadership.leader_address,
        metadata=config.metadata_url,
        etcd_tls=config.etcd.tls,
    )
    await servers.wait_for_signal()
    log.info("master_stopping", role=leadership.role)
    campaign.cancel()
    await asyncio.gather(campaign, return_exceptions=True)
    # At once, before the calls in flight drain: a standby leads while this one stops.
    await leadership.resign()
    await server.stop(config.grace_s)
    await metrics.close()
    await service.close()
    await raw_store.close()


def main(argv: list[str] | None = None) -> None:
    config, log_config = parse_args(argv)
    tune_for_large_buffers()
    observability.configure("master", log_config, cfg.load(cfg.TraceExportSettings))
    transport = Transport(SecuritySettings.from_env(), CHANNEL_OPTIONS)
    servers.run(lambda: serve(config, transport))


if __name__ == "__main__":
    main()
