"""Read throughput: Reservoir against reading S3 directly, on one machine.

    python bench/read_bench.py            # defaults (a few minutes)
    python bench/read_bench.py --quick    # smoke run (tiny data sets, one run per row)

Starts a local cluster (etcd, a moto-based S3 server with injected first-byte latency, the
master and --workers workers), uploads a "large" and a "small" data set, then measures:

  ceiling                       raw TCP loopback copy (socket -> page-aligned mmap buffer)
  boto3 direct                  get_object per file, thread pool of --concurrency
  s3fs+simplecache epoch 1/2    fsspec simplecache over s3fs; epoch 2 reads the local copies
  reservoir cold / warm         the Reservoir SDK; cold = empty worker caches

and prints a table (medians of --runs runs, with min/max) and writes all raw numbers to
--json. See bench/README.md for how to read it.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import mmap
import os
import platform
import random
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
BUCKET = "reservoir-bench"
MOUNT = "/bench"
HERE = Path(__file__).resolve().parent


# ---- results ------------------------------------------------------------------------------


@dataclass
class Run:
    seconds: float
    nbytes: int
    files: int
    s3: dict[str, int] = field(default_factory=dict)  # server-side request deltas by kind
    workers: dict[str, int] = field(default_factory=dict)  # worker stats deltas (reservoir)

    @property
    def mb_s(self) -> float:
        return self.nbytes / MiB / self.seconds

    @property
    def files_s(self) -> float:
        return self.files / self.seconds


@dataclass
class Row:
    dataset: str
    system: str
    runs: list[Run] = field(default_factory=list)
    note: str = ""

    def median(self, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.runs)

    def s3_gets(self) -> str:
        gets = sorted({r.s3.get("GET", 0) for r in self.runs})
        return "/".join(str(g) for g in gets) if gets else "-"

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "system": self.system,
            "note": self.note,
            "median_mb_s": self.median("mb_s"),
            "median_files_s": self.median("files_s"),
            "median_seconds": self.median("seconds"),
            "runs": [
                {
                    "seconds": r.seconds,
                    "bytes": r.nbytes,
                    "files": r.files,
                    "mb_s": r.mb_s,
                    "files_s": r.files_s,
                    "s3_requests": r.s3,
                    "worker_stats": r.workers,
                }
                for r in self.runs
            ],
        }


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- ceiling: TCP loopback ----------------------------------------------------------------


def tcp_loopback(total: int, buffer_bytes: int = 64 * MiB, send_chunk: int = 4 * MiB) -> Run:
    """`total` bytes from a sender thread to a receiver thread over 127.0.0.1, received with
    recv_into into a pre-touched, page-aligned (mmap) buffer used as a ring."""
    buf = mmap.mmap(-1, buffer_bytes)
    view = memoryview(buf)
    view[:] = b"\x01" * buffer_bytes  # fault the pages in before timing
    payload = memoryview(os.urandom(send_chunk))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def send() -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            left = total
            while left > 0:
                n = min(left, send_chunk)
                s.sendall(payload[:n])
                left -= n

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    conn, _ = listener.accept()
    got = pos = 0
    start = time.perf_counter()
    with conn:
        while got < total:
            if pos == buffer_bytes:
                pos = 0
            n = conn.recv_into(view[pos:], min(buffer_bytes - pos, total - got))
            if n == 0:
                raise RuntimeError("sender closed early")
            got += n
            pos += n
    seconds = time.perf_counter() - start
    sender.join()
    listener.close()
    view.release()
    buf.close()
    return Run(seconds, got, 0)


# ---- data sets ----------------------------------------------------------------------------


@dataclass
class Dataset:
    name: str
    prefix: str  # key prefix in the bucket, ending with "/"
    sizes: dict[str, int]  # file name -> size
    crcs: dict[str, int]
    order: list[str]  # shuffled read order

    @property
    def nbytes(self) -> int:
        return sum(self.sizes.values())


def make_datasets(args: argparse.Namespace, rng: random.Random) -> list[Dataset]:
    large_file = min(64 * MiB, args.large_mb * MiB)
    n_large = max(1, args.large_mb * MiB // large_file)
    large = {f"part-{i:04d}.bin": large_file for i in range(n_large)}
    small = {
        f"sample-{i:06d}.bin": rng.randint(16 * 1024, 30 * 1024) for i in range(args.small_files)
    }
    out = []
    for name, sizes in (("large", large), ("small", small)):
        order = sorted(sizes)
        rng.shuffle(order)
        out.append(Dataset(name, f"{name}/", sizes, {}, order))
    return out


def upload(s3: Any, ds: Dataset, threads: int, seed: int) -> float:
    start = time.perf_counter()

    def put(item: tuple[int, str]) -> tuple[str, int]:
        i, name = item
        data = random.Random(seed * 1_000_003 + i).randbytes(ds.sizes[name])
        s3.put_object(Bucket=BUCKET, Key=ds.prefix + name, Body=data)
        return name, zlib.crc32(data)

    with cf.ThreadPoolExecutor(threads) as pool:
        ds.crcs = dict(pool.map(put, enumerate(sorted(ds.sizes))))
    return time.perf_counter() - start


# ---- measuring ----------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cluster: Any = None
        self.rows: list[Row] = []
        self.extra: dict[str, Any] = {}

    def row(self, dataset: str, system: str, note: str = "") -> Row:
        row = Row(dataset, system, note=note)
        self.rows.append(row)
        return row

    def s3_counts(self) -> dict[str, int]:
        return dict(self.cluster.s3_counts())

    def measure(
        self,
        ds: Dataset,
        read_all: Callable[[], tuple[int, int]],
        worker_stats: Callable[[], dict[str, int]] | None = None,
    ) -> Run:
        """Times read_all() -> (bytes, files); checks it read the whole data set."""
        before = self.s3_counts()
        wbefore = worker_stats() if worker_stats else {}
        start = time.perf_counter()
        nbytes, files = read_all()
        seconds = time.perf_counter() - start
        after = self.s3_counts()
        wafter = worker_stats() if worker_stats else {}
        if nbytes != ds.nbytes or files != len(ds.sizes):
            raise RuntimeError(
                f"{ds.name}: read {files} files / {nbytes} bytes, expected "
                f"{len(ds.sizes)} / {ds.nbytes}"
            )
        s3 = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
        workers = {k: wafter[k] - wbefore.get(k, 0) for k in wafter}
        run = Run(seconds, nbytes, files, {k: v for k, v in s3.items() if v}, workers)
        log(
            f"  {ds.name}: {run.seconds:7.2f}s {run.mb_s:9.1f} MB/s {run.files_s:9.0f} files/s"
            f"  s3={run.s3}"
        )
        return run

    # ---- boto3 --------------------------------------------------------------------------

    def boto3_direct(self, ds: Dataset) -> None:
        import boto3
        from botocore.config import Config

        from reservoir.local.cluster import DEV_CREDENTIALS

        conc = self.args.concurrency

        client = boto3.client(
            "s3",
            endpoint_url=self.cluster.s3_endpoint,
            aws_access_key_id=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=DEV_CREDENTIALS["AWS_DEFAULT_REGION"],
            config=Config(max_pool_connections=conc, s3={"addressing_style": "path"}),
        )

        def get(name: str) -> int:
            body = client.get_object(Bucket=BUCKET, Key=ds.prefix + name)["Body"]
            try:
                return len(body.read())
            finally:
                body.close()

        row = self.row(ds.name, "boto3 direct", f"get_object, {conc} threads")
        log(f"boto3 direct, {ds.name}")
        with cf.ThreadPoolExecutor(conc) as pool:

            def read_all() -> tuple[int, int]:
                sizes = list(pool.map(get, ds.order))
                return sum(sizes), len(sizes)

            for _ in range(self.args.runs):
                row.runs.append(self.measure(ds, read_all))

    # ---- s3fs + simplecache -------------------------------------------------------------

    def s3fs_simplecache(self, ds: Dataset, cache_dir: Path) -> None:
        import fsspec

        from reservoir.local.cluster import DEV_CREDENTIALS

        conc = self.args.concurrency
        fs = fsspec.filesystem(
            "simplecache",
            target_protocol="s3",
            target_options={
                "key": DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                "secret": DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                "client_kwargs": {
                    "endpoint_url": self.cluster.s3_endpoint,
                    "region_name": DEV_CREDENTIALS["AWS_DEFAULT_REGION"],
                },
                "skip_instance_cache": True,
            },
            cache_storage=str(cache_dir),
            skip_instance_cache=True,
        )

        def get(name: str) -> int:
            with fs.open(f"{BUCKET}/{ds.prefix}{name}", "rb") as f:
                return len(f.read())

        with cf.ThreadPoolExecutor(conc) as pool:

            def read_all() -> tuple[int, int]:
                sizes = list(pool.map(get, ds.order))
                return sum(sizes), len(sizes)

            log(f"s3fs+simplecache epoch 1, {ds.name}")
            row = self.row(
                ds.name,
                "s3fs+simplecache epoch 1",
                f"downloads to a local disk cache, {conc} threads; single run",
            )
            row.runs.append(self.measure(ds, read_all))
            log(f"s3fs+simplecache epoch 2, {ds.name}")
            row = self.row(
                ds.name, "s3fs+simplecache epoch 2", f"reads the local copies, {conc} threads"
            )
            for _ in range(self.args.runs):
                row.runs.append(self.measure(ds, read_all))

    # ---- reservoir ----------------------------------------------------------------------

    def restart_workers(self) -> None:
        """Empty caches: stop every worker and start it again (same id and port)."""
        for name in self.cluster.worker_names():
            self.cluster.stop(name)
        for name in self.cluster.worker_names():
            self.cluster.start_worker(int(name.removeprefix("worker")))

    def reservoir(self, datasets: Sequence[Dataset]) -> None:
        from reservoir.client import Client

        args = self.args
        with Client(self.cluster.master_address) as client:
            options: dict[str, Any] = {"endpoint_url": self.cluster.s3_endpoint}
            if args.block_size_mb:
                options["block_size"] = args.block_size_mb * MiB
            client.mount(MOUNT, f"s3://{BUCKET}/", credentials="env", **options)

        cold = {
            ds.name: self.row(ds.name, "reservoir cold", self._how(ds) + "; workers restarted")
            for ds in datasets
        }
        warm = {
            ds.name: self.row(ds.name, "reservoir warm", self._how(ds) + "; over gRPC")
            for ds in datasets
        }
        short = {
            ds.name: self.row(
                ds.name,
                "reservoir short-circuit",
                self._how(ds) + "; same-host client reads the workers' /dev/shm files",
            )
            for ds in datasets
        }
        # The same warm reads with the client's checksum check off: what the check costs.
        unverified = {
            (ds.name, sc): self.row(
                ds.name,
                "reservoir short-circuit, no crc" if sc else "reservoir warm, no crc",
                self._how(ds) + "; RESERVOIR_VERIFY_CHECKSUMS=0 (measures the check's cost)",
            )
            for ds in datasets
            for sc in (False, True)
        }
        via_master = {
            ds.name: self.row(
                ds.name,
                "reservoir warm, stat@master",
                self._how(ds) + "; new client, no ls: stats via the master",
            )
            for ds in datasets
        }
        ls_seconds: dict[str, list[float]] = {ds.name: [] for ds in datasets}
        for run in range(args.runs):
            if run:
                log("restarting workers (cold cache)")
                self.restart_workers()
            # A fresh client per run: no channel or metadata state from the previous run.
            with self._client(short_circuit=False) as client:
                stats = self._stats(client)
                for rows, phase in ((cold, "cold"), (warm, "warm")):
                    for ds in datasets:
                        # Untimed: a loader lists its data set before reading it, which also
                        # fills the client's metadata cache (file_info_ttl_s), so every run
                        # starts with it fresh, whatever the previous run took.
                        start = time.perf_counter()
                        entries = client.ls(f"{MOUNT}/{ds.name}")
                        ls_seconds[ds.name].append(time.perf_counter() - start)
                        if len(entries) != len(ds.sizes):
                            raise RuntimeError(f"ls {ds.name}: {len(entries)} entries")
                        log(f"reservoir {phase} (run {run + 1}/{args.runs}), {ds.name}")
                        rows[ds.name].runs.append(self.measure(ds, self._reader(client, ds), stats))
                if run == 0:
                    self._verify(client, datasets)
            with self._client(short_circuit=True) as client:
                for ds in datasets:
                    client.ls(f"{MOUNT}/{ds.name}")
                    log(f"reservoir short-circuit (run {run + 1}/{args.runs}), {ds.name}")
                    short[ds.name].runs.append(
                        self.measure(ds, self._reader(client, ds), self._stats(client))
                    )
            for short_circuit in (False, True):
                with self._client(short_circuit=short_circuit, verify=False) as client:
                    for ds in datasets:
                        client.ls(f"{MOUNT}/{ds.name}")
                        log(f"reservoir no crc, short-circuit={short_circuit}, {ds.name}")
                        unverified[ds.name, short_circuit].runs.append(
                            self.measure(ds, self._reader(client, ds), self._stats(client))
                        )
            for ds in datasets:
                # An epoch longer than the client's metadata TTL: each read asks the master.
                with self._client(short_circuit=False) as client:
                    log(f"reservoir warm, stat@master (run {run + 1}/{args.runs}), {ds.name}")
                    run_ = self.measure(ds, self._reader(client, ds), self._stats(client))
                    via_master[ds.name].runs.append(run_)
        for row in cold.values():
            if any(r.workers.get("misses", 0) == 0 for r in row.runs):
                row.note += " (NOT COLD: no worker misses)"
        for row in [*warm.values(), *short.values(), *unverified.values(), *via_master.values()]:
            if any(r.s3.get("GET", 0) for r in row.runs):
                row.note += " (NOT WARM: S3 GETs)"
        self.extra["reservoir_ls_seconds"] = ls_seconds

    def _client(self, short_circuit: bool, verify: bool = True) -> Any:
        from reservoir.client import Client
        from reservoir.common.config import ClientConfig

        config = ClientConfig(
            master=self.cluster.master_address,
            short_circuit=short_circuit,
            verify_checksums=verify,
        )
        return Client(config=config)

    @staticmethod
    def _stats(client: Any) -> Callable[[], dict[str, int]]:
        def stats() -> dict[str, int]:
            total: dict[str, int] = {}
            for s in client.worker_stats():
                for key in ("hits", "misses", "ufs_gets", "bytes_from_ufs", "evictions"):
                    total[key] = total.get(key, 0) + int(getattr(s, key))
            return total

        return stats

    def _how(self, ds: Dataset) -> str:
        if ds.name == "large":
            return f"read() per file, {self.args.reservoir_large_threads} threads"
        return (
            f"read_many() of {self.args.batch} paths, {self.args.reservoir_small_threads} threads"
        )

    def _reader(self, client: Any, ds: Dataset) -> Callable[[], tuple[int, int]]:
        paths = [f"{MOUNT}/{ds.name}/{n}" for n in ds.order]
        if ds.name == "large":
            threads = self.args.reservoir_large_threads

            def read_all() -> tuple[int, int]:
                with cf.ThreadPoolExecutor(threads) as pool:
                    sizes = list(pool.map(lambda p: len(client.read(p)), paths))
                return sum(sizes), len(sizes)

            return read_all
        threads, batch = self.args.reservoir_small_threads, self.args.batch
        batches = [paths[i : i + batch] for i in range(0, len(paths), batch)]

        def read_many_all() -> tuple[int, int]:
            with cf.ThreadPoolExecutor(threads) as pool:
                done = list(pool.map(lambda b: [len(d) for d in client.read_many(b)], batches))
            sizes = [n for b in done for n in b]
            return sum(sizes), len(sizes)

        return read_many_all

    def _verify(self, client: Any, datasets: Sequence[Dataset]) -> None:
        """Untimed: the bytes Reservoir returns are the bytes uploaded (a sample)."""
        rng = random.Random(1)
        for ds in datasets:
            names = rng.sample(
                sorted(ds.sizes), min(len(ds.sizes), 50 if ds.name == "small" else 2)
            )
            datas = client.read_many([f"{MOUNT}/{ds.name}/{n}" for n in names])
            for name, data in zip(names, datas, strict=True):
                if zlib.crc32(data) != ds.crcs[name]:
                    raise RuntimeError(f"{ds.name}/{name}: content differs from the upload")
        log("content check passed")


# ---- output -------------------------------------------------------------------------------


def table(rows: list[Row], ceiling: Row) -> str:
    ceiling_mb = ceiling.median("mb_s")
    boto = {r.dataset: r.median("mb_s") for r in rows if r.system == "boto3 direct"}
    header = (
        f"{'dataset':<8} {'system':<28} {'runs':>4} {'MB/s':>8} {'(min-max)':>15} "
        f"{'files/s':>8} {'seconds':>8} {'S3 GETs':>8} {'x boto3':>8} {'% ceil':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in [ceiling, *rows]:
        mb = r.median("mb_s")
        spread = f"{min(x.mb_s for x in r.runs):.0f}-{max(x.mb_s for x in r.runs):.0f}"
        vs_boto = f"{mb / boto[r.dataset]:.2f}" if r.dataset in boto else "-"
        files = f"{r.median('files_s'):.0f}" if r.runs[0].files else "-"
        gets = r.s3_gets() if r.dataset != "-" else "-"
        lines.append(
            f"{r.dataset:<8} {r.system:<28} {len(r.runs):>4} {mb:>8.1f} {spread:>15} "
            f"{files:>8} {r.median('seconds'):>8.2f} {gets:>8} {vs_boto:>8} "
            f"{100 * mb / ceiling_mb:>6.1f}%"
        )
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": sys.version,
        "platform": platform.platform(),
        "loadavg": os.getloadavg(),
    }


# ---- main ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--small-files", type=int, default=2_000)
    p.add_argument("--large-mb", type=int, default=512, help="total; files of up to 64 MiB")
    p.add_argument("--s3-latency-ms", type=float, default=20.0, help="first-byte latency")
    p.add_argument("--concurrency", type=int, default=16, help="threads for boto3 and s3fs")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ceiling-mb", type=int, default=1024, help="bytes for the TCP ceiling")
    p.add_argument("--batch", type=int, default=256, help="paths per read_many() call")
    p.add_argument("--reservoir-small-threads", type=int, default=4)
    p.add_argument("--reservoir-large-threads", type=int, default=4)
    p.add_argument("--block-size-mb", type=int, default=0, help="0: the master's default")
    p.add_argument("--capacity", default="4GiB", help="cache capacity per worker")
    p.add_argument("--json", type=Path, default=HERE / "results" / "read_bench.json")
    p.add_argument("--state-dir", type=Path, default=None, help="default: a temp dir")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one run: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        args.small_files, args.large_mb, args.runs, args.ceiling_mb = 200, 32, 1, 256
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

    for key, value in DEV_CREDENTIALS.items():
        os.environ.setdefault(key, value)
    rng = random.Random(args.seed)
    info = machine_info()
    log(f"machine: {info['nproc']} cpus, load {info['loadavg']}")

    ceiling = Row("-", "ceiling: TCP loopback", note="sendall -> recv_into mmap, 2 threads")

    def measure_ceiling(when: str) -> None:
        # Half the runs before the cluster starts and half after it stops, so a noisy
        # neighbour at one moment does not set the scale alone.
        log(f"ceiling ({when}): TCP loopback, {args.ceiling_mb} MiB x {args.runs}")
        for _ in range(args.runs):
            ceiling.runs.append(tcp_loopback(args.ceiling_mb * MiB))
            log(f"  {ceiling.runs[-1].mb_s:.0f} MB/s")

    measure_ceiling("before")

    own_state = args.state_dir is None
    state_dir = Path(tempfile.mkdtemp(prefix="reservoir-bench-")) if own_state else args.state_dir
    cache_dir = Path(tempfile.mkdtemp(prefix="reservoir-bench-fsspec-"))
    bench = Bench(args)
    try:
        log(f"starting cluster ({args.workers} workers) in {state_dir}")
        bench.cluster = LocalCluster.up(
            state_dir, workers=args.workers, s3_latency_ms=0, capacity=args.capacity, shm=True
        )
        s3 = bench.cluster.s3_client()
        s3.create_bucket(Bucket=BUCKET)
        datasets = make_datasets(args, rng)
        upload_s: dict[str, float] = {}
        for ds in datasets:
            log(f"uploading {ds.name}: {len(ds.sizes)} files, {ds.nbytes / MiB:.0f} MiB")
            upload_s[ds.name] = upload(s3, ds, 16, args.seed)
            log(f"  {upload_s[ds.name]:.1f}s")
        bench.extra["upload_seconds"] = upload_s
        bench.cluster.s3_config(latency_ms=args.s3_latency_ms)

        for ds in datasets:
            bench.boto3_direct(ds)
        for ds in datasets:
            bench.s3fs_simplecache(ds, cache_dir / ds.name)
        bench.reservoir(datasets)
    finally:
        if bench.cluster is not None:
            log("stopping cluster")
            bench.cluster.down()
        shutil.rmtree(cache_dir, ignore_errors=True)
        if own_state:
            shutil.rmtree(state_dir, ignore_errors=True)

    measure_ceiling("after")
    order = {"large": 0, "small": 1}
    rows = sorted(bench.rows, key=lambda r: order[r.dataset])  # stable: system order kept
    text = table(rows, ceiling)
    print(text)
    info["loadavg_end"] = os.getloadavg()
    result = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": info,
        "datasets": {
            ds.name: {"files": len(ds.sizes), "bytes": ds.nbytes, "prefix": ds.prefix}
            for ds in datasets
        },
        "ceiling": ceiling.to_json(),
        "rows": [r.to_json() for r in rows],
        "extra": bench.extra,
        "table": text,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
