"""`reservoir`: the command line."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.config import format_size, parse_size
from reservoir.common.errors import ReservoirError
from reservoir.common.models import Inode

EXIT_ERROR = 1


def _master(args: argparse.Namespace) -> str:
    if args.master:
        return str(args.master)
    if os.environ.get("RESERVOIR_MASTER"):
        return os.environ["RESERVOIR_MASTER"]
    from reservoir.local.cluster import LocalCluster

    return LocalCluster.load(Path(args.state_dir)).master_address


def _client(args: argparse.Namespace) -> Any:
    from reservoir.client import Client
    from reservoir.common import config as cfg

    config = cfg.load(cfg.ClientConfig, master=_master(args))
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


def _emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    print(json.dumps(data, indent=2, default=str) if args.json else text())


def _inode_dict(inode: Inode) -> dict[str, Any]:
    return {
        "path": inode.path,
        "type": "directory" if inode.is_dir else "file",
        "size": inode.size,
        "mtime_ms": inode.mtime_ms,
        "etag": inode.etag,
        "block_size": inode.block_size,
        "file_id": inode.file_id,
        "ufs_uri": inode.ufs_uri,
        "locations": {str(k): v for k, v in inode.locations.items()},
    }


# ---- local cluster ---------------------------------------------------------------------


def cmd_local_up(args: argparse.Namespace) -> None:
    from reservoir.local.cluster import LocalCluster

    cluster = LocalCluster.up(
        Path(args.state_dir),
        workers=args.workers,
        s3_endpoint=args.s3_endpoint or "",
        s3_latency_ms=args.s3_latency_ms,
        capacity=args.capacity,
        shm=args.shm,
        disk_capacity=args.disk_capacity or "",
        secure=args.secure,
        keep_s3_data=True,
        resume=args.resume,
    )
    _emit(args, cluster.status(), lambda: cluster.master_address)
    if not args.json:
        print(f"# S3 endpoint: {cluster.s3_endpoint}   state: {cluster.state_dir}", file=sys.stderr)


def cmd_local_down(args: argparse.Namespace) -> None:
    from reservoir.local.cluster import LocalCluster

    file = Path(args.state_dir) / "cluster.json"
    if not file.exists():
        print("no local cluster running", file=sys.stderr)
        return
    LocalCluster.load(Path(args.state_dir)).down()
    print(
        "local cluster stopped (`reservoir local up --resume` starts it again with its mounts)",
        file=sys.stderr,
    )


def cmd_local_status(args: argparse.Namespace) -> None:
    from reservoir.local.cluster import LocalCluster

    status = LocalCluster.load(Path(args.state_dir)).status()

    def text() -> str:
        lines = [f"master {status['master']}  s3 {status['s3_endpoint']}"]
        for name, p in status["processes"].items():
            state = "running" if p["alive"] else "DEAD"
            metrics = f"  metrics={p['metrics']}" if "metrics" in p else ""
            lines.append(f"{name:10} {state:8} pid={p['pid']:<8} port={p['port']}{metrics}")
        return "\n".join(lines)

    _emit(args, status, text)


def cmd_local_demo(args: argparse.Namespace) -> None:
    from reservoir.local.demo import run_demo

    run_demo(Path(args.state_dir), files=args.files, json_output=args.json)


# ---- namespace -------------------------------------------------------------------------


def cmd_mount(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        mount = rs.mount(
            args.path,
            args.uri,
            endpoint_url=args.endpoint_url or "",
            region=args.region or "",
            block_size=args.block_size or 0,
            credentials=args.credentials or "",
            metadata_sync=args.metadata_sync or "",
            replace=args.replace,
        )
    _emit(
        args, {"path": mount.path, "uri": mount.uri}, lambda: f"mounted {mount.uri} at {mount.path}"
    )


def cmd_unmount(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        rs.unmount(args.path)
    _emit(args, {"unmounted": args.path}, lambda: f"unmounted {args.path}")


def cmd_mounts(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        mounts = rs.mounts()
    data = [
        {
            "path": m.path,
            "uri": m.uri,
            "endpoint_url": m.options.endpoint_url,
            "block_size": m.options.block_size,
            "credentials": m.options.credentials,
        }
        for m in mounts
    ]
    _emit(args, data, lambda: "\n".join(f"{m.path}\t{m.uri}" for m in mounts))


def cmd_ls(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        entries = rs.ls(args.path)

    def text() -> str:
        if not args.long:
            return "\n".join(e.path.rsplit("/", 1)[-1] + ("/" if e.is_dir else "") for e in entries)
        lines = []
        for e in entries:
            when = (
                time.strftime("%Y-%m-%d %H:%M", time.gmtime(e.mtime_ms / 1000))
                if e.mtime_ms
                else "-"
            )
            kind = "d" if e.is_dir else "-"
            lines.append(f"{kind} {e.size:>12} {when}  {e.path.rsplit('/', 1)[-1]}")
        return "\n".join(lines)

    _emit(args, [_inode_dict(e) for e in entries], text)


def cmd_stat(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        inode = rs.stat(args.path, with_locations=True)
    data = _inode_dict(inode)
    _emit(args, data, lambda: "\n".join(f"{k}: {v}" for k, v in data.items()))


def cmd_cat(args: argparse.Namespace) -> None:
    with _client(args) as rs, rs.open(args.path) as f:
        shutil.copyfileobj(f, sys.stdout.buffer, 4 << 20)
    sys.stdout.buffer.flush()


def cmd_cp(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    target = Path(args.dest)
    tmp = target.with_name(target.name + ".part")
    with _client(args) as rs, rs.open(args.path) as src, tmp.open("wb") as dst:
        shutil.copyfileobj(src, dst, 4 << 20)
    tmp.replace(target)
    size = target.stat().st_size
    seconds = time.perf_counter() - start
    _emit(
        args,
        {"path": args.path, "dest": str(target), "bytes": size, "seconds": seconds},
        lambda: f"copied {size} bytes to {target} in {seconds:.2f}s",
    )


def cmd_workers(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        workers = rs.workers()
        stats = {s.worker_id: s for s in rs.worker_stats(reachable_only=True)} if args.long else {}
    data = []
    for w in workers:
        item: dict[str, Any] = {
            "id": w.id,
            "address": w.address,
            "host": w.host,
            "zone": w.zone,
            "capacity_bytes": w.capacity_bytes,
        }
        if w.id in stats:
            s = stats[w.id]
            item.update(
                used_bytes=s.used_bytes,
                blocks=s.blocks,
                hits=s.hits,
                misses=s.misses,
                evictions=s.evictions,
                corrupt_blocks=s.corrupt_blocks,
                bytes_served=dict(sorted(s.bytes_served.items())),
                ufs_gets=s.ufs_gets,
                ufs_errors=s.ufs_errors,
                bytes_from_ufs=s.bytes_from_ufs,
                tiers=[_tier_dict(t) for t in s.tiers],
            )
        elif args.long:
            item["reachable"] = False  # registered (its lease runs on) but not answering
        data.append(item)

    def line(item: dict[str, Any]) -> str:
        plain = "\t".join(str(v) for v in item.values() if not isinstance(v, (dict, list)))
        served = item.get("bytes_served")
        sources = " ".join(f"{k}={format_size(v)}" for k, v in (served or {}).items())
        tiers = "".join(f"\n  {_tier_text(t)}" for t in item.get("tiers", []))
        return plain + (f"\n  served {sources}" if sources else "") + tiers

    def text() -> str:
        return "\n".join(line(item) for item in data) or "(no live workers)"

    _emit(args, data, text)


def _tier_dict(t: Any) -> dict[str, Any]:
    return {
        "name": t.name,
        "path": t.path,
        "used_bytes": t.used_bytes,
        "capacity_bytes": t.capacity_bytes,
        "blocks": t.blocks,
        "evictions": t.evictions,
        "hits": t.hits,
        "in_service": t.in_service,
        "pinned_bytes": t.pinned_bytes,
    }


def _tier_text(t: dict[str, Any]) -> str:
    where = f" {t['path']}" if t["path"] else ""
    state = "" if t["in_service"] else "  OUT OF SERVICE"
    return (
        f"{t['name']}{where}: {_human(t['used_bytes'])}/{_human(t['capacity_bytes'])}, "
        f"{t['blocks']} blocks, pinned {_human(t['pinned_bytes'])}, "
        f"{t['hits']} hits, {t['evictions']} evictions{state}"
    )


# ---- warm-up ---------------------------------------------------------------------------


_human = format_size


def _job_dict(job: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    return dict(
        MessageToDict(
            job, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    )


class _Progress:
    """A live line on a terminal; plain lines (at most one a second) otherwise."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()
        self._start = time.monotonic()
        self._last = 0.0

    def job(self, job: Any) -> None:
        elapsed = max(time.monotonic() - self._start, 1e-6)
        rate = job.done_bytes / elapsed
        left = max(job.total_bytes - job.done_bytes, 0)
        eta = f"{left / rate:.0f}s" if rate > 0 and left else "-"
        pct = 100.0 * job.done_blocks / job.total_blocks if job.total_blocks else 0.0
        line = (
            f"{job.state:9} {pct:5.1f}%  blocks {job.done_blocks}/{job.total_blocks}"
            f" ({job.failed_blocks} failed)  files {job.total_files}"
            f"  {_human(job.done_bytes)}/{_human(job.total_bytes)}  {_human(rate)}/s  eta {eta}"
        )
        self._show(line, final=job.state in ("completed", "failed", "cancelled"))

    def metadata(self, p: Any) -> None:
        self._show(
            f"metadata: listed {p.listed}  written {p.written}  removed {p.removed}"
            f"  {p.elapsed_ms / 1000:.1f}s",
            final=p.done,
        )

    def _show(self, line: str, final: bool) -> None:
        now = time.monotonic()
        if self._tty:
            sys.stderr.write("\r\x1b[2K" + line + ("\n" if final else ""))
            sys.stderr.flush()
        elif final or now - self._last >= 1.0:
            print(line, file=sys.stderr, flush=True)
            self._last = now


def cmd_load(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        job = rs.submit_load(
            args.path,
            replicas=args.replicas,
            priority_paths=args.priority or [],
            metadata_only=args.metadata_only,
        )
        if not args.wait:
            _emit(args, _job_dict(job), lambda: f"submitted load job {job.id} for {job.path}")
            return
        progress = _Progress()
        final = rs.watch_job(job.id, progress=None if args.json else progress.job)
    _emit(args, _job_dict(final), lambda: f"job {final.id}: {final.state}")
    if final.state != "completed":
        for error in final.errors:
            print(f"  {error}", file=sys.stderr)
        sys.exit(EXIT_ERROR)


def cmd_jobs(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        jobs = rs.jobs()

    def text() -> str:
        lines = [f"{'id':12} {'state':9} {'blocks':>15} {'bytes':>20}  path"]
        for j in jobs:
            lines.append(
                f"{j.id:12} {j.state:9} {f'{j.done_blocks}/{j.total_blocks}':>15}"
                f" {f'{_human(j.done_bytes)}/{_human(j.total_bytes)}':>20}  {j.path}"
            )
        return "\n".join(lines)

    _emit(args, [_job_dict(j) for j in jobs], text)


def cmd_job(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        job = rs.cancel_job(args.id) if args.action == "cancel" else rs.job(args.id)
    data = _job_dict(job)
    _emit(args, data, lambda: "\n".join(f"{k}: {v}" for k, v in data.items()))


def cmd_report(args: argparse.Namespace) -> None:
    with _client(args) as rs:
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
                {"used_bytes": 0, "capacity_bytes": 0, "blocks": 0, "evictions": 0},
            )
            total["used_bytes"] += t.used_bytes
            total["capacity_bytes"] += t.capacity_bytes if t.in_service else 0
            total["blocks"] += t.blocks
            total["evictions"] += t.evictions
            total["pinned_bytes"] = total.get("pinned_bytes", 0) + t.pinned_bytes
    data = {
        "path": args.path,
        "files": r.files,
        "bytes": r.bytes,
        "blocks": r.blocks,
        "cached_blocks": r.cached_blocks,
        "cached_bytes": r.cached_bytes,
        "cached_ratio": r.cached_bytes / r.bytes if r.bytes else 1.0,
        "tiers": tiers,
        "unreachable_workers": unreachable,
    }

    def text() -> str:
        lines = [
            f"{args.path}: {r.files} files, {_human(r.bytes)}; cached {_human(r.cached_bytes)}"
            f" ({100 * data['cached_ratio']:.1f}%), {r.cached_blocks}/{r.blocks} blocks"
        ]
        for name, t in tiers.items():
            lines.append(
                f"  cluster {name}: {_human(t['used_bytes'])}/{_human(t['capacity_bytes'])}, "
                f"{t['blocks']} blocks, pinned {_human(t.get('pinned_bytes', 0))}, "
                f"{t['evictions']} evictions"
            )
        if unreachable:
            lines.append(f"  tiers leave out unreachable workers: {', '.join(unreachable)}")
        return "\n".join(lines)

    _emit(args, data, text)


def cmd_load_metadata(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        progress = _Progress()
        last = rs.load_metadata(
            args.path,
            recursive=not args.no_recursive,
            progress=None if args.json else progress.metadata,
        )
    _emit(
        args,
        _job_dict(last),
        lambda: f"{args.path}: {last.listed} entries in {last.elapsed_ms / 1000:.1f}s",
    )


# ---- cache rules: pin, TTL, free --------------------------------------------------------


def _rule_dict(rule: Any) -> dict[str, Any]:
    return {
        "path": rule.path,
        "mount_path": rule.mount_path,
        "ufs_prefix": rule.ufs_prefix,
        "pinned": rule.pinned,
        "pinned_files": rule.pinned_files,
        "pinned_bytes": rule.pinned_bytes,
        "ttl_s": rule.ttl_ms / 1000 if rule.ttl_ms else None,
    }


def _rule_text(r: dict[str, Any]) -> str:
    parts = []
    if r["pinned"]:
        parts.append(f"pinned ({r['pinned_files']} files, {_human(r['pinned_bytes'])})")
    if r["ttl_s"]:
        parts.append(f"ttl {r['ttl_s']:g}s")
    return f"{r['path']}\t{', '.join(parts) or '-'}"


def cmd_pin(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        reply = rs.pin(args.path)
        job = rs.watch_job(reply.load_job_id) if args.wait else None
    data = _rule_dict(reply.rule) | {"load_job_id": reply.load_job_id}
    if job is not None:
        data["load_job"] = _job_dict(job)

    def text() -> str:
        line = f"{_rule_text(data)}; loading in job {reply.load_job_id}"
        if job is not None:
            line += f" ({job.state}: {job.done_blocks}/{job.total_blocks} blocks)"
        return line

    _emit(args, data, text)
    if job is not None and job.state != "completed":
        sys.exit(EXIT_ERROR)


def cmd_unpin(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        rule = rs.unpin(args.path)
    _emit(args, _rule_dict(rule), lambda: f"unpinned {rule.path}")


def cmd_ttl(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        if args.action == "set":
            if not args.duration:
                raise ValueError("ttl set needs a DURATION, e.g. 6h")
            rule = rs.set_ttl(args.path, args.duration)
        else:
            rule = rs.clear_ttl(args.path)
    data = _rule_dict(rule)
    _emit(args, data, lambda: _rule_text(data))


def cmd_rules(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        rules = rs.cache_rules()
    data = [_rule_dict(r) for r in rules]
    _emit(args, data, lambda: "\n".join(_rule_text(r) for r in data) or "(no pins or TTLs)")


def cmd_free(args: argparse.Namespace) -> None:
    with _client(args) as rs:
        r = rs.free(args.path)
    data = {
        "path": args.path,
        "files": r.files,
        "freed_blocks": r.freed_blocks,
        "freed_bytes": r.freed_bytes,
        "pinned_files": r.pinned_files,
    }
    kept = f"; {r.pinned_files} pinned files kept (unpin first)" if r.pinned_files else ""
    _emit(
        args,
        data,
        lambda: f"freed {_human(r.freed_bytes)} ({r.freed_blocks} blocks) of {args.path}{kept}",
    )


# ---- credentials for a real cluster ---------------------------------------------------


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def cmd_credentials_create(args: argparse.Namespace) -> None:
    from reservoir.local import pki
    from reservoir.local.pki import LocalCredentials

    try:
        import cryptography  # noqa: F401
    except ImportError as exc:  # the client-only install
        raise ValueError(
            "`reservoir credentials create` needs the cryptography package "
            "(pip install cryptography, or the `local` extra)"
        ) from exc
    directory = Path(args.dir)
    workers = pki.check_worker_ids(_names(args.workers))
    if not workers:
        raise ValueError("--workers names no worker")
    existing = LocalCredentials(directory)
    if not args.force and (existing.ca.exists() or existing.tokens_file.exists()):
        raise ValueError(
            f"{directory} already holds credentials (--force replaces them: every process "
            "then needs the new ones)"
        )
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    hosts = _names(args.hosts or "")
    creds = pki.create(directory, workers, days=args.days, hosts=hosts, label="reservoir")
    files = {
        "ca": str(creds.ca),
        "cert": str(creds.cert),
        "key": str(creds.key),
        "tokens_file": str(creds.tokens_file),
        "tokens": {name: str(creds.token(name)) for name in (*pki.RESERVED_NAMES, *workers)},
        "hosts": pki.subject_alt_names(hosts),
        "days": args.days,
    }
    # Paths only: a token is printed by nothing but `reservoir token new`.
    _emit(
        args,
        files,
        lambda: "\n".join(
            [
                f"CA                  {creds.ca}",
                f"server certificate  {creds.cert}  (valid for {', '.join(files['hosts'])};"
                f" {args.days} days)",
                f"server key          {creds.key}",
                f"tokens file         {creds.tokens_file}  (servers: RESERVOIR_AUTH_TOKENS_FILE)",
                *(f"{name + ' token':19} {path}" for name, path in files["tokens"].items()),
            ]
        ),
    )


def _read_token_from_stdin() -> str:
    token = sys.stdin.readline().strip()
    if not token:
        raise ValueError("expected a token on standard input")
    return token


def cmd_token_hash(args: argparse.Namespace) -> None:
    from reservoir.common.auth import token_hash

    print(token_hash(_read_token_from_stdin()))


def cmd_token_new(args: argparse.Namespace) -> None:
    from reservoir.common.auth import new_token, token_hash
    from reservoir.local import pki

    subject = args.subject or ""
    if args.role == "worker" and not subject:
        raise ValueError("a worker token names its worker: --subject WORKER_ID")
    if args.role == "worker":
        pki.check_worker_ids([subject])
    elif any(c.isspace() or c == "#" for c in subject):
        raise ValueError(f"a subject has no spaces and no '#': {subject!r}")
    token = new_token()
    # The line for the servers' tokens file goes to stderr, the token alone to stdout:
    # `reservoir token new --role reader > reader.token 2>> tokens.sha256`.
    print(f"{args.role} {token_hash(token)} {subject}".rstrip(), file=sys.stderr)
    print(token)


def cmd_health(args: argparse.Namespace) -> None:
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc
    except ImportError as exc:  # the client-only install
        raise ValueError("`reservoir health` needs grpcio-health-checking") from exc
    import grpc

    from reservoir.common.rpc import CHANNEL_OPTIONS
    from reservoir.common.security import SecuritySettings, Transport

    transport = Transport(SecuritySettings.from_env(), CHANNEL_OPTIONS)
    with transport.sync_channel(args.address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            print(f"{args.address}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            sys.exit(EXIT_ERROR)
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    _emit(args, {"address": args.address, "status": status}, lambda: status)
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        sys.exit(EXIT_ERROR)


# ---- parser ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from reservoir.common.auth import ROLES
    from reservoir.local.cluster import DEFAULT_STATE_DIR

    parser = argparse.ArgumentParser(
        prog="reservoir", description="Reservoir: a data cache for ML training."
    )
    parser.add_argument(
        "--master",
        help="master address host:port (default: $RESERVOIR_MASTER, else the local cluster)",
    )
    parser.add_argument(
        "--state-dir", default=str(DEFAULT_STATE_DIR), help="local cluster state directory"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)

    local = sub.add_parser("local", help="a cluster on this machine").add_subparsers(
        dest="action", required=True
    )
    up = local.add_parser("up", help="start etcd, S3 (unless given), the master and workers")
    up.add_argument("--workers", type=int, default=2)
    up.add_argument("--s3-endpoint", help="use this S3 endpoint instead of starting one")
    up.add_argument(
        "--s3-latency-ms", type=float, default=0.0, help="first-byte latency of the local S3"
    )
    up.add_argument("--capacity", default="1GiB", help="cache capacity per worker")
    up.add_argument(
        "--disk-capacity",
        metavar="SIZE",
        help="workers also keep blocks on disk, up to SIZE each, under the state dir "
        "(kept across worker restarts)",
    )
    up.add_argument(
        "--shm",
        action="store_true",
        help="workers keep blocks in /dev/shm: same-host short-circuit reads",
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="TLS on every hop and tokens with roles: a local CA, certificates and one token "
        "per role in the state dir (recorded in cluster.json)",
    )
    up.add_argument(
        "--resume",
        action="store_true",
        help="start the stopped cluster of --state-dir again, with its mounts and S3 data "
        "(default: a clean cluster, the stopped one's data wiped)",
    )
    up.set_defaults(func=cmd_local_up)
    local.add_parser("down", help="stop the local cluster").set_defaults(func=cmd_local_down)
    local.add_parser("status", help="show the local cluster").set_defaults(func=cmd_local_status)
    demo = local.add_parser("demo", help="write a sample data set, mount it, read it twice")
    demo.add_argument("--files", type=int, default=400)
    demo.set_defaults(func=cmd_local_demo)

    p = sub.add_parser("mount", help="mount an under-store URI at a Reservoir path")
    p.add_argument("path")
    p.add_argument("uri", help="s3://bucket/prefix or file:///dir")
    p.add_argument("--endpoint-url")
    p.add_argument("--region")
    p.add_argument("--block-size", type=parse_size)
    p.add_argument("--credentials", help="env (default), anonymous, or file:/path")
    p.add_argument(
        "--metadata-sync", help="never, always, or interval:<duration> (default interval:5m)"
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace the mount already at PATH (new URI, endpoint, credentials, block size)",
    )
    p.set_defaults(func=cmd_mount)
    p = sub.add_parser("unmount", help="remove a mount")
    p.add_argument("path")
    p.set_defaults(func=cmd_unmount)
    sub.add_parser("mounts", help="list mounts").set_defaults(func=cmd_mounts)
    p = sub.add_parser("ls", help="list a directory")
    p.add_argument("path", nargs="?", default="/")
    p.add_argument("-l", "--long", action="store_true")
    p.set_defaults(func=cmd_ls)
    p = sub.add_parser("stat", help="file info, with block locations")
    p.add_argument("path")
    p.set_defaults(func=cmd_stat)
    p = sub.add_parser("cat", help="write a file to stdout")
    p.add_argument("path")
    p.set_defaults(func=cmd_cat)
    p = sub.add_parser("cp", help="copy a file out of Reservoir")
    p.add_argument("path")
    p.add_argument("dest")
    p.set_defaults(func=cmd_cp)
    p = sub.add_parser("load", help="preload a path into the cache (a load job)")
    p.add_argument("path")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--priority", action="append", metavar="PATH", help="load these first")
    p.add_argument("--metadata-only", action="store_true", help="only sync the namespace")
    p.add_argument("--wait", action="store_true", help="show progress until the job ends")
    p.set_defaults(func=cmd_load)
    p = sub.add_parser("load-metadata", help="sync the namespace below a path from S3")
    p.add_argument("path")
    p.add_argument("--no-recursive", action="store_true")
    p.set_defaults(func=cmd_load_metadata)
    sub.add_parser("jobs", help="list load jobs").set_defaults(func=cmd_jobs)
    p = sub.add_parser("job", help="show or cancel a load job")
    p.add_argument("action", choices=["show", "cancel"])
    p.add_argument("id")
    p.set_defaults(func=cmd_job)
    p = sub.add_parser("report", help="how much of a path is cached")
    p.add_argument("path")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser(
        "pin", help="keep a path's files in the cache, never evicted (and load them now)"
    )
    p.add_argument("path")
    p.add_argument("--wait", action="store_true", help="wait until they are loaded")
    p.set_defaults(func=cmd_pin)
    p = sub.add_parser("unpin", help="let a pinned path's files be evicted again")
    p.add_argument("path")
    p.set_defaults(func=cmd_unpin)
    p = sub.add_parser(
        "ttl",
        help="cached blocks below a path (a mount path: the whole mount) expire DURATION "
        "after they landed: read again from the under-store, evicted first",
    )
    p.add_argument("action", choices=["set", "clear"])
    p.add_argument("path")
    p.add_argument("duration", nargs="?", help="e.g. 90s, 30m, 6h, 7d")
    p.set_defaults(func=cmd_ttl)
    sub.add_parser("rules", help="list pins and TTLs").set_defaults(func=cmd_rules)
    p = sub.add_parser("free", help="evict a path's blocks from every worker now")
    p.add_argument("path")
    p.set_defaults(func=cmd_free)
    p = sub.add_parser("workers", help="live workers")
    p.add_argument("-l", "--long", action="store_true", help="with cache usage")
    p.set_defaults(func=cmd_workers)

    p = sub.add_parser(
        "health",
        help="check a master or worker over gRPC health (TLS settings from RESERVOIR_TLS_*)",
    )
    p.add_argument("address", help="host:port, e.g. 127.0.0.1:19998")
    p.add_argument("--service", default="", help="health service name (default: the server)")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds")
    p.set_defaults(func=cmd_health)

    credentials = sub.add_parser(
        "credentials", help="TLS certificates and tokens for a real cluster"
    ).add_subparsers(dest="action", required=True)
    p = credentials.add_parser(
        "create",
        help="write a CA, a server certificate and key, one token per role and per worker, "
        "and the servers' tokens file (hashes) into DIR",
    )
    p.add_argument("dir", metavar="DIR")
    p.add_argument(
        "--workers",
        required=True,
        help="comma-separated worker ids (RESERVOIR_WORKER_ID; on Kubernetes the node names)",
    )
    p.add_argument(
        "--hosts",
        help="comma-separated host names and IP addresses the servers are dialled by "
        "(the certificate is always valid for localhost, 127.0.0.1 and ::1 too)",
    )
    p.add_argument("--days", type=int, default=365, help="validity of the CA and certificate")
    p.add_argument("--force", action="store_true", help="replace credentials already in DIR")
    p.set_defaults(func=cmd_credentials_create)

    token = sub.add_parser("token", help="make or hash a single token").add_subparsers(
        dest="action", required=True
    )
    p = token.add_parser(
        "new",
        help="print a new token on stdout and its tokens-file line on stderr",
    )
    p.add_argument("--role", required=True, choices=list(ROLES))
    p.add_argument("--subject", help="the worker id of a worker token; a label otherwise")
    p.set_defaults(func=cmd_token_new)
    p = token.add_parser("hash", help="read a token on stdin, print its SHA-256")
    p.set_defaults(func=cmd_token_hash)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from reservoir.local.cluster import ClusterError

    # Data and results go to stdout; log lines only ever to stderr.
    logs.configure_output(cfg.load(cfg.LogConfig, defaults={"level": cfg.CLI_LOG_LEVEL}))

    try:
        args.func(args)
    except BrokenPipeError:
        sys.exit(0)
    except (ReservoirError, ClusterError, OSError, ValueError) as exc:
        print(f"reservoir: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
