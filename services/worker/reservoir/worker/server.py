"""`reservoir-worker`: a cache node. Registers under a lease, serves blocks, reports them."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time

from reservoir.common import config as cfg
from reservoir.common import logs, observability
from reservoir.common.malloc_tuning import tune_for_bounded_footprint
from reservoir.common.metadata.metadata_store import open_metadata_store
from reservoir.common.metadata.worker_registry import WorkerRegistry
from reservoir.common.models import WorkerRecord
from reservoir.common.rpc import CHANNEL_OPTIONS
from reservoir.common.security import SecuritySettings, Transport, data_port_server_context
from reservoir.common.serving import servers
from reservoir.common.serving.auth import TokenTable
from reservoir.common.serving.metrics_endpoint import MetricsEndpoint, server_registry
from reservoir.common.serving.rpc_metrics import RpcMetrics
from reservoir.common.tmpfs_mount import HugeTmpfs
from reservoir.common.worker_calls import WorkerCalls, WorkerDeadlines

from .block_reporter import BlockReporter
from .cache_rules import CacheRuleTable
from .data_port import DataPort
from .data_port_metrics import DataPortMetrics
from .eviction import POLICIES
from .idle_reclaim import IdleReclaim
from .leaving import drain_before_leaving
from .master_link import MasterLink
from .membership import Membership
from .metrics import WorkerMetrics
from .mount_table import MountTable
from .part_uploads import PartUploads
from .peer_copy import PeerCopy
from .service import WorkerService
from .servicer import SERVICE, WorkerServicer
from .share_weight import ShareWeight
from .shm_tier import ShmTier
from .written_blocks import WrittenBlocks

log = logs.get_logger(__name__)


def parse_args(argv: list[str] | None = None) -> tuple[cfg.WorkerConfig, cfg.LogConfig]:
    parser = argparse.ArgumentParser(
        prog="reservoir-worker",
        description="Reservoir worker. Every flag has an environment variable (see README).",
    )
    parser.add_argument("--listen", help="host:port to serve gRPC on")
    parser.add_argument("--advertise", help="host:port clients dial (default: --listen)")
    parser.add_argument("--worker-id")
    parser.add_argument("--zone")
    parser.add_argument("--region")
    parser.add_argument("--capacity", type=cfg.parse_size, help="cache bytes, e.g. 4GiB")
    parser.add_argument(
        "--shm-dir", help="keep blocks as files here (tmpfs) for short-circuit reads"
    )
    parser.add_argument(
        "--disk-dirs", help="comma-separated directories for the disk tier (one per device)"
    )
    parser.add_argument(
        "--disk-capacity", type=cfg.parse_size, help="bytes of blocks per disk directory"
    )
    parser.add_argument(
        "--eviction", choices=list(POLICIES), help="which blocks a tier keeps (default tinylfu)"
    )
    parser.add_argument("--master", help="master host:port")
    parser.add_argument("--metadata-url", help="etcd://host:port")
    parser.add_argument("--lease-ttl", type=int)
    parser.add_argument("--log-format", choices=["console", "json"])
    parser.add_argument(
        "--metrics-listen", help="host:port to serve Prometheus /metrics on (port 0 = choose)"
    )
    args = parser.parse_args(argv)
    config = cfg.load(
        cfg.WorkerConfig,
        listen=args.listen,
        advertise=args.advertise,
        worker_id=args.worker_id,
        zone=args.zone,
        region=args.region,
        capacity_bytes=args.capacity,
        shm_dir=args.shm_dir,
        eviction=args.eviction,
        disk_dirs=args.disk_dirs,
        disk_capacity_bytes=args.disk_capacity,
        master=args.master,
        metadata_url=args.metadata_url,
        lease_ttl_s=args.lease_ttl,
        metrics=cfg.load(cfg.MetricsSettings, listen=args.metrics_listen),
    )
    return config, cfg.load(cfg.LogConfig, format=args.log_format)


def _data_listen(config: cfg.WorkerConfig) -> tuple[str, int]:
    if config.data_listen:
        host, _, port = config.data_listen.rpartition(":")
        return host.strip("[]"), int(port)
    return config.listen.rsplit(":", 1)[0].strip("[]"), 0


def _advertise(config: cfg.WorkerConfig, port: int) -> str:
    if config.advertise:
        return config.advertise
    host = config.listen.rsplit(":", 1)[0]
    if host in ("0.0.0.0", "[::]", ""):
        host = config.host
    return f"{host}:{port}"


def memory_tier_mount(config: cfg.WorkerConfig) -> HugeTmpfs | None:
    """The huge-page tmpfs the memory tier's block files live on, when the worker mounts
    one (`shm_huge_pages=mount`): sized with room beyond the capacity for the spare files
    and for the blocks landing while others are evicted, which the tier counts only once
    published."""
    if not config.shm_dir or config.shm_huge_pages != "mount":
        return None
    room = max(config.capacity_bytes // 4, 256 * 1024 * 1024) + config.spare_limit_bytes
    return HugeTmpfs(config.shm_dir, config.capacity_bytes + room)


async def serve(config: cfg.WorkerConfig, transport: Transport) -> None:
    memory_mount = memory_tier_mount(config)
    if memory_mount is not None:
        memory_mount.open()  # before the tier empties the directory and lands blocks there
    try:
        await _serve(config, transport)
    finally:
        if memory_mount is not None:
            memory_mount.close()


async def _serve(config: cfg.WorkerConfig, transport: Transport) -> None:
    registry = server_registry()
    server = servers.new_server("worker", transport, RpcMetrics(registry))
    port = servers.bind(server, config.listen, transport)
    address = _advertise(config, port)
    worker_id = config.worker_id or address
    config = cfg.WorkerConfig(**{**config.__dict__, "worker_id": worker_id})
    link = MasterLink(config.master, config.rpc_timeout_s, config.master_probe_timeout_s, transport)
    store = open_metadata_store(
        config.metadata_url, config.metadata_timeout_s, config.etcd, config.metadata_page_keys
    )
    mounts = MountTable(
        store,
        link,
        config.mount_watch_backoff_s,
        config.mount_watch_backoff_max_s,
        config.mount_recheck_interval_s,
    )
    rules = CacheRuleTable(store, config.mount_watch_backoff_s, config.mount_watch_backoff_max_s)
    # Before any block is kept or evicted: which ones are pinned.
    await rules.load()
    service = WorkerService(
        config,
        mounts,
        rules,
        unlisted_shm=bool(transport.settings.auth_tokens_file),
        registry=registry,
    )
    # Written files' blocks (checkpoints): kept where staged, reported to the master.
    reporter = BlockReporter(config, service, link)
    written = WrittenBlocks(service, store, reporter)
    uploads = PartUploads(service, store, written)
    peer_calls = WorkerCalls(transport, WorkerDeadlines(rpc_s=config.rpc_timeout_s))
    peers = PeerCopy(service, peer_calls)
    server.add_generic_rpc_handlers([WorkerServicer(service, written, uploads, peers).handler()])
    # With TLS the data port speaks it too (or, below the privacy level, takes token
    # proofs in clear), and checks the tokens gRPC checks.
    security = transport.settings
    data_port = (
        DataPort(
            service,
            config,
            DataPortMetrics(registry),
            tls=data_port_server_context(security),
            tokens=TokenTable.load(security.auth_tokens_file)
            if security.auth_tokens_file
            else None,
            level=security.data_level,
        )
        if config.data_port
        else None
    )
    registry.register(WorkerMetrics(service))
    metrics = MetricsEndpoint(registry, config.metrics)
    await servers.add_health_and_reflection(server, [SERVICE])
    record = WorkerRecord(
        id=worker_id,
        address=address,
        host=config.host,
        zone=config.zone,
        region=config.region,
        capacity_bytes=config.capacity_bytes,
        started_ms=int(time.time() * 1000),
        shm_dir=str(service.store.memory.directory)
        if isinstance(service.store.memory, ShmTier)
        else "",
    )
    if data_port is not None:
        data_host, data_port_number = _data_listen(config)
        bound = await data_port.start(data_host, data_port_number)
        level = security.data_level
        record = dataclasses.replace(
            record,
            data_address=f"{address.rsplit(':', 1)[0]}:{bound}",
            data_protection=level.value if level is not None else "",
        )
    membership = Membership(store, record, config, reporter)
    memory = service.store.memory
    if config.shm_preallocate and isinstance(memory, ShmTier):
        # Before joining: the first cold blocks land in pages that are already there.
        made = await asyncio.to_thread(memory.preallocate, config.default_block_size)
        log.info("shm_preallocated", files=made, block_size=config.default_block_size)
    # Before the first (full) report: the blocks kept on disk are held again.
    await service.store.start()
    await server.start()
    await metrics.start()
    follow_mounts = asyncio.create_task(mounts.follow())
    # Clients read from a worker once it has joined: by then its S3 clients are built.
    await service.fetcher.open_stores(config.store_open_wait_s)
    await membership.register()
    weight = ShareWeight(
        WorkerRegistry(store), service.shares, service.store, worker_id, config.capacity_bytes
    )
    await weight.refresh()  # before a quota'd mount keeps anything here
    idle = IdleReclaim(service.shares, service.store, rules, store, worker_id)
    log.info("worker_started", worker=worker_id, address=address, capacity=config.capacity_bytes)

    loops = [
        asyncio.create_task(
            servers.every(max(1.0, config.lease_ttl_s / 3), "lease_keepalive", membership.keepalive)
        ),
        asyncio.create_task(
            servers.every(config.report_interval_s, "block_report", reporter.report)
        ),
        follow_mounts,
        asyncio.create_task(rules.follow()),
        asyncio.create_task(
            servers.every(config.ttl_sweep_interval_s, "ttl_sweep", service.expire_due)
        ),
        asyncio.create_task(servers.every(config.share_interval_s, "share_weight", weight.refresh)),
        asyncio.create_task(servers.every(config.idle_sweep_interval_s, "idle_sweep", idle.sweep)),
    ]
    await servers.wait_for_signal()
    # Still serving and reporting while the master copies its blocks elsewhere.
    await drain_before_leaving(link, worker_id, config.drain_timeout_s)
    log.info("worker_stopping", worker=worker_id)
    for task in loops:
        task.cancel()
    await server.stop(config.grace_s)
    if data_port is not None:
        await data_port.close()
    await metrics.close()
    try:
        await membership.leave()
    except Exception as exc:
        log.warning("worker_leave_failed", error=str(exc))
    await service.store.close(config.grace_s)
    service.close()
    await peer_calls.close()
    await link.close()
    await store.close()


def main(argv: list[str] | None = None) -> None:
    config, log_config = parse_args(argv)
    if config.shm_dir:
        tune_for_bounded_footprint(
            config.malloc_shm_mmap_threshold, config.malloc_shm_trim_threshold
        )
    else:
        tune_for_bounded_footprint(config.malloc_mmap_threshold, config.malloc_trim_threshold)
    observability.configure("worker", log_config, cfg.load(cfg.TraceExportSettings))
    transport = Transport(SecuritySettings.from_env(), CHANNEL_OPTIONS)
    servers.run(lambda: serve(config, transport))


if __name__ == "__main__":
    main()
