"""`reservoir-master`: the master process."""

from __future__ import annotations

import argparse
import asyncio

from reservoir.common import config as cfg
from reservoir.common import logs, observability, serving
from reservoir.common.malloc_tuning import tune_for_large_buffers
from reservoir.common.metadata_store import open_metadata_store
from reservoir.common.metrics_endpoint import MetricsEndpoint, server_registry
from reservoir.common.rpc import CHANNEL_OPTIONS
from reservoir.common.rpc_metrics import RpcMetrics
from reservoir.common.security import SecuritySettings, Transport
from reservoir.common.store_health import StoreHealthServicer
from reservoir.v1 import master_pb2, master_pb2_grpc

from .metrics import MasterMetrics
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
        default_block_size=args.block_size,
        metrics=cfg.load(cfg.MetricsSettings, listen=args.metrics_listen),
    )
    return master, cfg.load(cfg.LogConfig, format=args.log_format)


async def serve(config: cfg.MasterConfig, transport: Transport) -> None:
    store = open_metadata_store(
        config.metadata_url, config.metadata_timeout_s, config.etcd, config.metadata_page_keys
    )
    registry = server_registry()
    service = MasterService(store, config, transport, registry)
    await service.start()
    server = serving.new_server("master", transport, RpcMetrics(registry))
    collector = MasterMetrics(service, store)
    registry.register(collector)
    metrics = MetricsEndpoint(registry, config.metrics, before_scrape=collector.refresh)
    master_pb2_grpc.add_MasterServiceServicer_to_server(MasterServicer(service), server)
    await serving.add_health_and_reflection(
        server,
        [master_pb2.DESCRIPTOR.services_by_name["MasterService"].full_name],
        StoreHealthServicer(service.metadata_health),
    )
    port = serving.bind(server, config.listen, transport)
    await server.start()
    await metrics.start()
    log.info(
        "master_started",
        listen=config.listen,
        port=port,
        metadata=config.metadata_url,
        etcd_tls=config.etcd.tls,
    )
    loops = [
        asyncio.create_task(
            serving.every(
                config.location_flush_interval_s, "location_flush", service.flush_locations
            )
        ),
        asyncio.create_task(
            serving.every(
                config.worker_refresh_interval_s, "worker_refresh", service.refresh_workers
            )
        ),
    ]
    await serving.wait_for_signal()
    log.info("master_stopping")
    await server.stop(config.grace_s)
    await metrics.close()
    for task in loops:
        task.cancel()
    await service.close()
    try:
        await service.flush_locations()
    except Exception as exc:
        log.warning("final_location_flush_failed", error=str(exc))
    await store.close()


def main(argv: list[str] | None = None) -> None:
    config, log_config = parse_args(argv)
    tune_for_large_buffers()
    observability.configure("master", log_config, cfg.load(cfg.TraceExportSettings))
    transport = Transport(SecuritySettings.from_env(), CHANNEL_OPTIONS)
    serving.run(lambda: serve(config, transport))


if __name__ == "__main__":
    main()
