"""The cluster's state: `workers`, `masters`, `report`, `health`."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from .connection import open_client
from .output import EXIT_ERROR, Table, emit, human, time_fields
from .subcommands import Subcommands


def _ratio(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def cmd_workers(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        workers = rs.workers()
        stats = {s.worker_id: s for s in rs.worker_stats(reachable_only=True)} if args.long else {}
    data = []
    for w in workers:
        item: dict[str, Any] = {
            "id": w.id,
            "address": w.address,
            # Block bytes leave a worker here (and by gRPC): what an operator firewalls.
            "data_address": w.data_address or None,
            "host": w.host,
            "zone": w.zone,
            "region": w.region,
            "capacity_bytes": w.capacity_bytes,
            "state": w.state,
            **time_fields("started", w.started_ms),
        }
        if w.id in stats:
            counters = dataclasses.asdict(stats[w.id])
            del counters["worker_id"]
            item["reachable"] = True
            item.update(counters)
        elif args.long:
            item["reachable"] = False  # registered (its lease runs on) but not answering
        data.append(item)

    def text() -> str:
        if not data:
            return "(no live workers)"
        if not args.long:
            table = Table(
                "ID", "STATE", "ADDRESS", "DATA PORT", "HOST", "ZONE", "REGION", "CAPACITY",
                "STARTED",
                numeric=("CAPACITY",),
            )  # fmt: skip
            for i in data:
                table.row(
                    i["id"], i["state"], i["address"], i["data_address"], i["host"], i["zone"],
                    i["region"], human(i["capacity_bytes"]), i["started"],
                )  # fmt: skip
            return table.render()
        table = Table(
            "ID", "ADDRESS", "STATE", "USED", "CAPACITY", "BLOCKS", "HITS", "MISSES", "HIT RATIO",
            "FROM CACHE", "FROM S3", "EVICTIONS", "CORRUPT",
            numeric=("USED", "CAPACITY", "BLOCKS", "HITS", "MISSES", "HIT RATIO", "FROM CACHE",
                     "FROM S3", "EVICTIONS", "CORRUPT"),
        )  # fmt: skip
        tiers = Table(
            "WORKER", "TIER", "PATH", "STATE", "USED", "CAPACITY", "BLOCKS", "PINNED", "HITS",
            "EVICTIONS",
            numeric=("USED", "CAPACITY", "BLOCKS", "PINNED", "HITS", "EVICTIONS"),
        )  # fmt: skip
        for i in data:
            if not i["reachable"]:
                table.row(i["id"], i["address"], "UNREACHABLE", *["-"] * 10)
                continue
            table.row(
                i["id"], i["address"], i["state"], human(i["used_bytes"]),
                human(i["capacity_bytes"]), i["blocks"], i["hits"], i["misses"],
                _ratio(i["hits"], i["hits"] + i["misses"]), human(i["bytes_from_cache"]),
                human(i["bytes_from_ufs"]), i["evictions"], i["corrupt_blocks"],
            )  # fmt: skip
            for t in i["tiers"]:
                tiers.row(
                    i["id"], t["name"], t["path"],
                    "in service" if t["in_service"] else "OUT OF SERVICE",
                    human(t["used_bytes"]), human(t["capacity_bytes"]), t["blocks"],
                    human(t["pinned_bytes"]), t["hits"], t["evictions"],
                )  # fmt: skip
        return f"{table.render()}\n\n{tiers.render()}"

    emit(args, data, text)


def cmd_masters(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        masters = rs.masters()
    data = [
        {
            "address": m.address,
            "role": m.role,
            **time_fields("since", m.since_ms),
            "term": m.term,
            "id": m.id,
        }
        for m in masters
    ]

    def text() -> str:
        table = Table("ADDRESS", "ROLE", "SINCE", "TERM", numeric=("TERM",))
        for m in data:
            table.row(m["address"], m["role"], m["since"], m["term"])
        return table.render(empty="(no master recorded in etcd)")

    emit(args, data, text)


def cmd_report(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        r = rs.report(args.path)
        workers = rs.workers()
        stats = rs.worker_stats(reachable_only=True)
    answered = {s.worker_id for s in stats}
    unreachable = sorted(w.id for w in workers if w.id not in answered)
    tiers: dict[str, dict[str, int]] = {}  # the cluster's tiers, by kind
    for s in stats:
        for t in s.tiers:
            total = tiers.setdefault(
                t.name,
                {"used_bytes": 0, "capacity_bytes": 0, "blocks": 0, "evictions": 0,
                 "pinned_bytes": 0},
            )  # fmt: skip
            total["used_bytes"] += t.used_bytes
            total["capacity_bytes"] += t.capacity_bytes if t.in_service else 0
            total["blocks"] += t.blocks
            total["evictions"] += t.evictions
            total["pinned_bytes"] += t.pinned_bytes
    data = dataclasses.asdict(r) | {
        "cached_ratio": r.cached_fraction,
        "tiers": tiers,
        "unreachable_workers": unreachable,
    }

    def text() -> str:
        lines = [str(r), ""]
        table = Table(
            "TIER", "USED", "CAPACITY", "BLOCKS", "PINNED", "EVICTIONS",
            numeric=("USED", "CAPACITY", "BLOCKS", "PINNED", "EVICTIONS"),
        )  # fmt: skip
        for name, t in tiers.items():
            table.row(
                name, human(t["used_bytes"]), human(t["capacity_bytes"]), t["blocks"],
                human(t["pinned_bytes"]), t["evictions"],
            )  # fmt: skip
        lines.append(table.render(empty="(no reachable worker)"))
        if unreachable:
            lines.append(f"tiers leave out unreachable workers: {', '.join(unreachable)}")
        return "\n".join(lines)

    emit(args, data, text)


def cmd_health(args: argparse.Namespace) -> None:
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc
    except ImportError as exc:  # the client-only install
        raise ValueError(
            "`reservoir health` needs grpcio-health-checking (the `server` extra)"
        ) from exc
    import grpc

    from reservoir.common.metadata.store_health import METADATA_SERVICE
    from reservoir.common.rpc import CHANNEL_OPTIONS
    from reservoir.common.security import SecuritySettings, Transport

    transport = Transport(SecuritySettings.from_env(), CHANNEL_OPTIONS)
    with transport.sync_channel(args.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
            serving = reply.status == health_pb2.HealthCheckResponse.SERVING
            if serving and not args.service and not args.server_only:
                _check_metadata_store(stub, METADATA_SERVICE, args.timeout)
        except grpc.RpcError as exc:
            print(f"{args.address}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            sys.exit(EXIT_ERROR)
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    emit(args, {"address": args.address, "status": status}, lambda: status)
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        sys.exit(EXIT_ERROR)


def _check_metadata_store(stub: Any, service: str, timeout: float) -> None:
    """A master also checks its metadata store (etcd reachable, not out of space); a server
    without a store (a worker) answers NOT_FOUND, which is no failure."""
    import grpc
    from grpc_health.v1 import health_pb2

    try:
        stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise


def register(commands: Subcommands) -> None:
    p = commands.add("workers", "live workers, as a table", cmd_workers)
    p.add_argument(
        "-l",
        "--long",
        action="store_true",
        help="with each worker's cache usage, hits and misses, and a table of its tiers",
    )
    commands.add(
        "masters",
        "the masters: address, role (leader or standby), since when, and the leader's term",
        cmd_masters,
    )
    p = commands.add("report", "how much of a path is cached, and the cluster's tiers", cmd_report)
    p.add_argument("path", help="the file or directory")
    p = commands.add(
        "health",
        "check a master or worker over gRPC health (TLS settings from RESERVOIR_TLS_*); a "
        "master also checks its etcd (reachable, not out of space); exit 0 when all is well",
        cmd_health,
    )
    p.add_argument("address", help="host:port, e.g. 127.0.0.1:19998")
    p.add_argument("--service", default="", help="health service name (default: the server)")
    p.add_argument(
        "--server-only",
        action="store_true",
        help="check the server alone, not a master's etcd (for probes: a master whose etcd "
        "is full or away still serves reads, and restarting it does not help)",
    )
    p.add_argument(
        "--timeout", type=float, default=3.0, metavar="SECONDS", help="deadline (default 3)"
    )
