"""`reservoir-worker`: a cache node. Registers under a lease, serves blocks, reports them."""

from __future__ import annotations

import argparse
import asyncio
import time

import grpc
import grpc.aio
import structlog

from reservoir.common import config as cfg
from reservoir.common import observability, serving
from reservoir.common.errors import NotFound
from reservoir.common.malloc_tuning import tune_for_bounded_footprint
from reservoir.common.metadata_store import Lease, MetadataStore, open_metadata_store
from reservoir.common.models import Mount, WorkerRecord
from reservoir.common.rpc import CHANNEL_OPTIONS, error_from_rpc
from reservoir.common.security import SecuritySettings, Transport
from reservoir.common.worker_registry import WorkerRegistry
from reservoir.v1 import common_pb2, master_pb2, master_pb2_grpc

from .mount_table import MountTable
from .service import WorkerService
from .servicer import SERVICE, WorkerServicer

log = structlog.get_logger()


def parse_args(argv: list[str] | None = None) -> tuple[cfg.WorkerConfig, cfg.LogConfig]:
    parser = argparse.ArgumentParser(
        prog="reservoir-worker",
        description="Reservoir worker. Every flag has an environment variable (see README).",
    )
    parser.add_argument("--listen", help="host:port to serve gRPC on")
    parser.add_argument("--advertise", help="host:port clients dial (default: --listen)")
    parser.add_argument("--worker-id")
    parser.add_argument("--zone")
    parser.add_argument("--capacity", type=cfg.parse_size, help="cache bytes, e.g. 4GiB")
    parser.add_argument(
        "--shm-dir", help="keep blocks as files here (tmpfs) for short-circuit reads"
    )
    parser.add_argument("--master", help="master host:port")
    parser.add_argument("--metadata-url", help="etcd://host:port")
    parser.add_argument("--lease-ttl", type=int)
    parser.add_argument("--log-format", choices=["console", "json"])
    args = parser.parse_args(argv)
    config = cfg.load(
        cfg.WorkerConfig,
        listen=args.listen,
        advertise=args.advertise,
        worker_id=args.worker_id,
        zone=args.zone,
        capacity_bytes=args.capacity,
        shm_dir=args.shm_dir,
        master=args.master,
        metadata_url=args.metadata_url,
        lease_ttl_s=args.lease_ttl,
    )
    return config, cfg.load(cfg.LogConfig, format=args.log_format)


class MasterLink:
    """The worker's calls to the master, each with its deadline."""

    def __init__(self, address: str, timeout_s: float, transport: Transport) -> None:
        self._channel = transport.channel(address)
        self._stub = master_pb2_grpc.MasterServiceStub(self._channel)
        self._timeout = timeout_s

    async def mounts(self) -> list[Mount]:
        try:
            response = await self._stub.ListMounts(
                master_pb2.ListMountsRequest(),
                timeout=self._timeout,
                metadata=observability.inject_metadata(),
            )
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, "list mounts from the master") from exc
        return [Mount.from_proto(m) for m in response.mounts]

    async def report(
        self,
        worker_id: str,
        full: bool,
        added: list[tuple[str, int]],
        removed: list[tuple[str, int]],
    ) -> None:
        request = master_pb2.ReportBlocksRequest(
            worker_id=worker_id,
            full=full,
            added=[common_pb2.BlockRef(file_id=f, index=i) for f, i in added],
            removed=[common_pb2.BlockRef(file_id=f, index=i) for f, i in removed],
        )
        try:
            await self._stub.ReportBlocks(request, timeout=self._timeout)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, "report blocks to the master") from exc

    async def close(self) -> None:
        await self._channel.close()


class Membership:
    """Keeps this worker registered; re-registers (with a full report) if the lease is lost."""

    def __init__(
        self, store: MetadataStore, record: WorkerRecord, config: cfg.WorkerConfig
    ) -> None:
        self._registry = WorkerRegistry(store)
        self._store = store
        self._record = record
        self._config = config
        self.lease: Lease | None = None
        self.needs_full_report = True

    async def register(self) -> None:
        self._record, self.lease = await self._registry.register(
            self._record, self._config.lease_ttl_s
        )
        self.needs_full_report = True
        log.info("worker_registered", worker=self._record.id, lease=self.lease.id)

    async def keepalive(self) -> None:
        if self.lease is None:
            await self.register()
            return
        try:
            await self._store.refresh_lease(self.lease)
        except NotFound:
            log.warning("worker_lease_lost", worker=self._record.id)
            await self.register()

    async def leave(self) -> None:
        if self.lease is not None:
            await self._store.revoke_lease(self.lease)


def _advertise(config: cfg.WorkerConfig, port: int) -> str:
    if config.advertise:
        return config.advertise
    host = config.listen.rsplit(":", 1)[0]
    if host in ("0.0.0.0", "[::]", ""):
        host = config.host
    return f"{host}:{port}"


async def serve(config: cfg.WorkerConfig, transport: Transport) -> None:
    server = serving.new_server("worker", transport)
    port = serving.bind(server, config.listen, transport)
    address = _advertise(config, port)
    worker_id = config.worker_id or address
    config = cfg.WorkerConfig(**{**config.__dict__, "worker_id": worker_id})
    link = MasterLink(config.master, config.rpc_timeout_s, transport)
    store = open_metadata_store(config.metadata_url, config.metadata_timeout_s)
    mounts = MountTable(
        store,
        link,
        config.mount_watch_backoff_s,
        config.mount_watch_backoff_max_s,
        config.mount_recheck_interval_s,
    )
    service = WorkerService(config, mounts)
    server.add_generic_rpc_handlers([WorkerServicer(service).handler()])
    await serving.add_health_and_reflection(server, [SERVICE])
    record = WorkerRecord(
        id=worker_id,
        address=address,
        host=config.host,
        zone=config.zone,
        capacity_bytes=config.capacity_bytes,
        started_ms=int(time.time() * 1000),
        shm_dir=config.shm_dir,
    )
    membership = Membership(store, record, config)
    await server.start()
    await membership.register()
    log.info("worker_started", worker=worker_id, address=address, capacity=config.capacity_bytes)

    last_full = time.monotonic()

    async def report() -> None:
        nonlocal last_full
        if time.monotonic() - last_full >= config.full_report_interval_s:
            membership.needs_full_report = True
        full = membership.needs_full_report
        if full:
            added, removed = service.tier.blocks(), list[tuple[str, int]]()
            service.take_report()
        else:
            added, removed = service.take_report()
            if not added and not removed:
                return
        try:
            await link.report(worker_id, full, added, removed)
        except Exception:
            if not full:
                service.put_back_report(added, removed)
            raise
        membership.needs_full_report = False
        if full:
            last_full = time.monotonic()

    loops = [
        asyncio.create_task(
            serving.every(max(1.0, config.lease_ttl_s / 3), "lease_keepalive", membership.keepalive)
        ),
        asyncio.create_task(serving.every(config.report_interval_s, "block_report", report)),
        asyncio.create_task(mounts.follow()),
    ]
    await serving.wait_for_signal()
    log.info("worker_stopping", worker=worker_id)
    for task in loops:
        task.cancel()
    await server.stop(config.grace_s)
    try:
        await membership.leave()
    except Exception as exc:
        log.warning("worker_leave_failed", error=str(exc))
    service.close()
    await link.close()
    await store.close()


def main(argv: list[str] | None = None) -> None:
    config, log_config = parse_args(argv)
    tune_for_bounded_footprint(config.malloc_mmap_threshold, config.malloc_trim_threshold)
    observability.configure("worker", log_config)
    transport = Transport(SecuritySettings.from_env(), CHANNEL_OPTIONS)
    serving.run(lambda: serve(config, transport))


if __name__ == "__main__":
    main()
