"""Read speed: issue #8's table, every row measured in one run on this machine.

    python bench/read_bench.py                  # defaults (SeaweedFS S3), 3 runs per row
    python bench/read_bench.py --s3 moto        # the tests' moto server instead
    python bench/read_bench.py --quick          # smoke run: tiny data sets, one run
    python bench/read_bench.py --rows gateway   # the gateway's rows and their baselines only

Starts a local cluster (etcd, the S3 server with 20 ms first-byte latency, the master and
--workers workers with /dev/shm block files), uploads the data sets with nothing timed,
then measures the S3 reference rows, the cold Reservoir rows (fresh never-listed prefix,
restarted workers, no ls first), the warm rows (remote, i.e. through workers' data ports,
and gRPC only for comparison; short-circuit; read per file, read_many, the checkpoint,
several processes), boto3 through the S3 gateway (cold and warm), and the machine's
ceilings (TCP loopback, page-cache readinto). Prints the target table (ratios of medians, target, met or not)
and every row; writes --json and --png. See bench/README.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import mmap
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed import readers, targets  # noqa: E402 - bench/ is not a package
from speed.datasets import (  # noqa: E402
    BUCKET,
    MOUNT,
    Dataset,
    checkpoint_dataset,
    large_dataset,
    small_dataset,
    upload,
    upload_file,
    write_checkpoint,
)
from speed.plot import draw  # noqa: E402
from speed.results import MiB, Row, Run, log, machine_info  # noqa: E402
from speed.s3_servers import S3Choice  # noqa: E402
from speed.session import COLD, WARM, Session  # noqa: E402
from speed.shm_flags import add_shm_arguments, shm_env  # noqa: E402

HERE = Path(__file__).resolve().parent


# ---- ceilings -----------------------------------------------------------------------------


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


# ---- phases -------------------------------------------------------------------------------


class ReadBench:
    def __init__(self, args: argparse.Namespace, session: Session, work: Path) -> None:
        self.args = args
        self.s = session
        self.work = work
        rng = random.Random(args.seed)
        self.small = small_dataset(args.small_files, rng)
        self.large = large_dataset(args.large_files, args.large_file_mb, rng)
        self.checkpoint = checkpoint_dataset(args.checkpoint_mb)
        self.local_checkpoint = work / "checkpoint.bin"
        self.extra: dict[str, Any] = {}
        # `--rows gateway`: the gateway's rows and only the rows they are divided by.
        self.gateway_only = args.rows == "gateway"

    def cold_prefix(self, ds: Dataset, run: int) -> str:
        return f"cold{run + 1}/{ds.prefix}"

    def gateway_cold_prefix(self, ds: Dataset, run: int) -> str:
        return f"gwcold{run + 1}/{ds.prefix}"

    def upload(self) -> None:
        a = self.args
        cluster = self.s.cluster
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket=BUCKET)
        seconds: dict[str, float] = {}
        for ds in (self.small, self.large):
            prefixes = [ds.prefix]
            if not self.gateway_only:
                prefixes += [self.cold_prefix(ds, r) for r in range(a.runs)]
            if ds is self.small:  # the gateway's cold rows read never-read copies too
                prefixes += [self.gateway_cold_prefix(ds, r) for r in range(a.runs)]
            log(f"uploading {ds.name}: {len(ds.sizes)} files x {len(prefixes)} prefixes")
            start = time.perf_counter()
            upload(s3, ds, prefixes, 16, a.seed)
            seconds[ds.name] = time.perf_counter() - start
        if not self.gateway_only:
            log(f"uploading checkpoint: {self.checkpoint.nbytes // MiB} MiB")
            start = time.perf_counter()
            upload_file(s3, self.checkpoint, self.local_checkpoint)
            seconds["checkpoint"] = time.perf_counter() - start
        self.extra["upload_seconds"] = seconds
        log(f"  uploads took {seconds}")
        with self.s.client(short_circuit=False) as client:
            client.mount(
                MOUNT, f"s3://{BUCKET}/", credentials="env", endpoint_url=cluster.s3_endpoint
            )

    def s3_rows(self) -> None:
        a, s = self.args, self.s
        endpoint = s.cluster.s3_endpoint
        conc = a.concurrency
        s3 = readers.boto3_client(endpoint, conc)
        with cf.ThreadPoolExecutor(conc) as pool:
            for ds in (self.small, self.large):
                boto = s.row(ds.name, targets.BOTO3, f"get_object per file, {conc} threads")
                fs = s.row(ds.name, targets.S3FS, f"cat_file per file, {conc} threads")
                boto_read = readers.boto3_reader(s3, ds, pool)
                fs_read = readers.s3fs_reader(endpoint, ds, pool)
                for run in range(a.runs):
                    log(f"S3 direct, {ds.name}, run {run + 1}/{a.runs}")
                    s.measure(boto, ds, boto_read)
                    if not self.gateway_only:
                        s.measure(fs, ds, fs_read)
                if self.gateway_only:
                    continue
                cache = readers.simplecache_reader(
                    endpoint, ds, pool, self.work / f"fsspec-{ds.name}"
                )
                log(f"s3fs+simplecache, {ds.name}")
                s.measure(
                    s.row(
                        ds.name,
                        targets.SIMPLECACHE_1,
                        "open+read per file; fills the cache; one run",
                    ),
                    ds,
                    cache,
                )
                e2 = s.row(
                    ds.name, targets.SIMPLECACHE_2, f"reads the local copies, {conc} threads"
                )
                for _ in range(a.runs):
                    s.measure(e2, ds, cache)
        if self.gateway_only:
            return
        row = s.row("checkpoint", targets.BOTO3_ONE_GET, "one get_object(...).read()")
        one = readers.boto3_one_get(s3, self.checkpoint)
        for run in range(a.runs):
            log(f"boto3 one get_object, checkpoint, run {run + 1}/{a.runs}")
            s.measure(row, self.checkpoint, one)

    def cold_rows(self) -> None:
        """Empty caches, a new client, a prefix nobody has listed or read: what the first
        epoch of a job costs. Per file `Client.read`, no ls first."""
        a, s = self.args, self.s
        note = f"read per file, {a.concurrency} threads; workers restarted, fresh prefix, no ls"
        for run in range(a.runs):
            if run:
                log("restarting workers (empty caches)")
                s.restart_workers()
            with (
                s.client(short_circuit=False) as client,
                cf.ThreadPoolExecutor(a.concurrency) as pool,
            ):
                for ds in (self.small, self.large):
                    fresh = ds.at(self.cold_prefix(ds, run))
                    log(f"reservoir cold, {ds.name}, run {run + 1}/{a.runs}")
                    s.measure(
                        s.row(ds.name, targets.COLD_READ, note),
                        fresh,
                        readers.reservoir_read(client, fresh, pool),
                        cache=COLD,
                    )

    def warm_up(self) -> None:
        """Untimed except the checkpoint's first read (its own row): every warm data set
        read once through the workers."""
        s = self.s
        with (
            s.client(short_circuit=False) as client,
            cf.ThreadPoolExecutor(self.args.concurrency) as pool,
        ):
            for ds in (self.small, self.large):
                log(f"warming {ds.name}")
                read = readers.reservoir_read(client, ds, pool)()
                if read.wrong:
                    raise RuntimeError(f"warm-up of {ds.name}: bytes differ: {read.wrong[:3]}")
            if self.gateway_only:
                return
            log("warming checkpoint (cold readinto)")
            s.measure(
                s.row("checkpoint", targets.CKPT_COLD, "first read, through the workers; one run"),
                self.checkpoint,
                readers.reservoir_readinto(client, self.checkpoint),
                cache=COLD,
            )

    def warm_rows(self) -> None:
        if self.gateway_only:
            self.warm_remote_rows()
            return
        a, s = self.args, self.s
        conc, many = a.concurrency, f"read_many {a.many_threads} threads x {a.batch} paths"
        for run in range(a.runs):
            log(f"warm rows, run {run + 1}/{a.runs}")
            with (
                s.client(short_circuit=False, data_port=False) as client,
                cf.ThreadPoolExecutor(conc) as pool,
            ):
                # For comparison: the remote path as it was before data ports.
                for ds in (self.small, self.large):
                    client.ls(f"{MOUNT}/{ds.name}")
                    s.measure(
                        s.row(
                            ds.name,
                            targets.WARM_GRPC_ONLY_READ,
                            f"read per file, {conc} threads, data port off",
                        ),
                        ds,
                        readers.reservoir_read(client, ds, pool),
                        cache=WARM,
                    )
            for short_circuit in (False, True):
                path = "short-circuit" if short_circuit else "remote (data port)"
                with (
                    s.client(short_circuit=short_circuit) as client,
                    cf.ThreadPoolExecutor(conc) as pool,
                    cf.ThreadPoolExecutor(a.many_threads) as many_pool,
                ):
                    for ds in (self.small, self.large):
                        client.ls(f"{MOUNT}/{ds.name}")  # a loader lists its data set first
                        system = targets.WARM_SC_READ if short_circuit else targets.WARM_REMOTE_READ
                        s.measure(
                            s.row(ds.name, system, f"read per file, {conc} threads, {path}"),
                            ds,
                            readers.reservoir_read(client, ds, pool),
                            cache=WARM,
                        )
                    system = targets.WARM_SC_MANY if short_circuit else targets.WARM_REMOTE_MANY
                    s.measure(
                        s.row("small", system, f"{many}, {path}"),
                        self.small,
                        readers.reservoir_read_many(client, self.small, many_pool, a.batch),
                        cache=WARM,
                    )
                    ckpt = self.checkpoint
                    for system, reader in (
                        (
                            targets.CKPT_SC_READ if short_circuit else targets.CKPT_READ,
                            readers.reservoir_open_read(client, ckpt),
                        ),
                        (
                            targets.CKPT_SC_READINTO if short_circuit else targets.CKPT_READINTO,
                            readers.reservoir_readinto(client, ckpt),
                        ),
                    ):
                        s.measure(
                            s.row("checkpoint", system, f"one reader, {path}"),
                            ckpt,
                            reader,
                            cache=WARM,
                        )
            for n, system in ((1, targets.PROCS_1), (a.processes, targets.PROCS_N)):
                s.measure(
                    s.row("small", system, f"{n} x ({many}), remote; aggregate"),
                    self.small,
                    readers.reservoir_processes(
                        s.cluster.master_address, self.small, n, a.many_threads, a.batch, False
                    ),
                    cache=WARM,
                    files=n * len(self.small.sizes),
                )

    def warm_remote_rows(self) -> None:
        """`--rows gateway`: of the warm rows, only the SDK's remote read per file (what
        the gateway's large row is divided by)."""
        a, s = self.args, self.s
        note = f"read per file, {a.concurrency} threads, remote (data port)"
        for run in range(a.runs):
            log(f"warm remote rows, run {run + 1}/{a.runs}")
            with (
                s.client(short_circuit=False) as client,
                cf.ThreadPoolExecutor(a.concurrency) as pool,
            ):
                for ds in (self.small, self.large):
                    client.ls(f"{MOUNT}/{ds.name}")
                    s.measure(
                        s.row(ds.name, targets.WARM_REMOTE_READ, note),
                        ds,
                        readers.reservoir_read(client, ds, pool),
                        cache=WARM,
                    )

    def gateway_rows(self) -> None:
        """boto3 from `concurrency` threads through `reservoir gateway` (one process beside
        the cluster, reading it like any client): small files cold (never-read copies) and
        warm, large files warm; beside boto3 straight to S3 and the SDK's own reads."""
        a, s = self.args, self.s
        log("starting the S3 gateway")
        s.cluster.start_gateway()
        bucket = MOUNT.strip("/")
        conc = a.concurrency
        gateway = readers.boto3_client(s.cluster.gateway_url, conc)
        note = f"get_object per file, {conc} threads, through the gateway"
        with cf.ThreadPoolExecutor(conc) as pool:
            for run in range(a.runs):
                fresh = self.small.at(self.gateway_cold_prefix(self.small, run))
                log(f"gateway cold, small, run {run + 1}/{a.runs}")
                s.measure(
                    s.row("small", targets.GATEWAY_COLD, note + "; never-read copy"),
                    fresh,
                    readers.boto3_reader(gateway, fresh, pool, bucket, verify=True),
                    cache=COLD,
                )
            for run in range(a.runs):
                log(f"gateway warm, run {run + 1}/{a.runs}")
                for ds in (self.small, self.large):
                    s.measure(
                        s.row(ds.name, targets.GATEWAY_WARM, note),
                        ds,
                        readers.boto3_reader(gateway, ds, pool, bucket, verify=True),
                        cache=WARM,
                    )


# ---- output -------------------------------------------------------------------------------


def rows_table(rows: list[Row]) -> str:
    header = (
        f"{'dataset':<10} {'system':<50} {'runs':>4} {'MB/s':>8} {'(min-max)':>11} "
        f"{'files/s':>8} {'seconds':>8} {'S3 GETs':>9} {'S3 cpu s':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        if not r.runs:
            continue
        spread = f"{min(x.mb_s for x in r.runs):.0f}-{max(x.mb_s for x in r.runs):.0f}"
        files = f"{r.median('files_s'):.0f}" if r.runs[0].files else "-"
        cpu = [x.extra["s3_server_cpu_s"] for x in r.runs if "s3_server_cpu_s" in x.extra]
        cpu_s = f"{sorted(cpu)[len(cpu) // 2]:.1f}" if cpu else "-"
        gets = r.s3_gets() if r.dataset != targets.CEILING else "-"
        flag = " (!)" if r.problems else ""
        lines.append(
            f"{r.dataset:<10} {r.system:<50} {len(r.runs):>4} {r.median('mb_s'):>8.1f} "
            f"{spread:>11} {files:>8} {r.median('seconds'):>8.2f} {gets:>9} {cpu_s:>8}{flag}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--s3",
        choices=("seaweedfs", "moto"),
        default="seaweedfs",
        help="S3 server: seaweedfs (needs the bench extra) or moto (the tests' server)",
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--capacity", default="4GiB", help="cache capacity per worker")
    p.add_argument("--small-files", type=int, default=2_000, help="files of 8-40 KB")
    p.add_argument("--large-files", type=int, default=8)
    p.add_argument("--large-file-mb", type=int, default=32)
    p.add_argument("--checkpoint-mb", type=int, default=2048, help="the one checkpoint file")
    p.add_argument("--s3-latency-ms", type=float, default=20.0, help="first-byte latency")
    p.add_argument("--concurrency", type=int, default=16, help="threads of per-file readers")
    p.add_argument("--many-threads", type=int, default=4, help="read_many calls in flight")
    p.add_argument("--batch", type=int, default=64, help="paths per read_many call")
    p.add_argument("--processes", type=int, default=4, help="client processes (many row)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ceiling-mb", type=int, default=1024, help="bytes for the TCP ceiling")
    p.add_argument("--json", type=Path, default=HERE / "results" / "read_bench.json")
    p.add_argument("--png", type=Path, default=HERE / "results" / "read_bench.png")
    p.add_argument("--state-dir", type=Path, default=None, help="default: a temp dir")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one run: a smoke test")
    add_shm_arguments(p)
    p.add_argument(
        "--rows",
        choices=("all", "gateway"),
        default="all",
        help="gateway: only the S3 gateway's rows and the rows they are divided by (boto3 "
        "direct, the SDK's warm remote read); no checkpoint, no ceilings",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.small_files, args.large_files, args.runs = 200, 2, 1
        args.checkpoint_mb, args.ceiling_mb = 64, 256
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

    started = time.perf_counter()
    for key, value in DEV_CREDENTIALS.items():
        os.environ.setdefault(key, value)
    info = machine_info()
    log(f"machine: {info['nproc']} cpus, load {info['loadavg']}; S3 server: {args.s3}")

    tcp = Row(targets.CEILING, targets.TCP, note="sendall -> recv_into mmap, 2 threads")
    page = Row(targets.CEILING, targets.PAGE_CACHE, note="warm local file, readinto 16 MiB")

    def tcp_ceiling(when: str) -> None:
        # Half the runs before the cluster starts and half after it stops, so a noisy
        # neighbour at one moment does not set the scale alone.
        log(f"ceiling ({when}): TCP loopback, {args.ceiling_mb} MiB x {args.runs}")
        for _ in range(args.runs):
            tcp.runs.append(tcp_loopback(args.ceiling_mb * MiB))
            log(f"  {tcp.runs[-1].mb_s:.0f} MB/s")

    gateway_only = args.rows == "gateway"
    if not gateway_only:
        tcp_ceiling("before")
    work = Path(tempfile.mkdtemp(prefix="reservoir-bench-work-"))
    own_state = args.state_dir is None
    state_dir = Path(tempfile.mkdtemp(prefix="reservoir-bench-")) if own_state else args.state_dir
    s3 = S3Choice(args.s3, work)
    cluster = session = None
    try:
        bench = ReadBench(args, Session(None, s3), work)
        if not gateway_only:
            log(f"writing the checkpoint ({args.checkpoint_mb} MiB) to {bench.local_checkpoint}")
            write_checkpoint(bench.checkpoint, bench.local_checkpoint, args.seed)
            page_read = readers.page_cache_reader(bench.local_checkpoint)
            page_read()  # warm
            for _ in range(args.runs):
                got = page_read()
                page.runs.append(Run(got.seconds, got.nbytes, 0))
                log(f"  page-cache readinto: {page.runs[-1].mb_s:.0f} MB/s")
        endpoint = s3.start()
        log(f"starting cluster ({args.workers} workers) in {state_dir}")
        cluster = LocalCluster.up(
            state_dir,
            workers=args.workers,
            s3_endpoint=endpoint,
            capacity=args.capacity,
            shm=True,
            env={**(DEV_CREDENTIALS if endpoint else {}), **shm_env(args)},
        )
        session = Session(cluster, s3)
        bench.s = session
        bench.upload()
        cluster.s3_config(latency_ms=args.s3_latency_ms)
        bench.s3_rows()
        if not gateway_only:
            bench.cold_rows()
        bench.warm_up()
        bench.warm_rows()
        bench.gateway_rows()
    finally:
        if session is not None:
            session.close()
        if cluster is not None:
            log("stopping cluster")
            cluster.down()
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
        if own_state:
            shutil.rmtree(state_dir, ignore_errors=True)
    if not gateway_only:
        tcp_ceiling("after")

    rows = [tcp, page, *session.rows]
    medians = {
        r.key: {"mb_s": r.median("mb_s"), "files_s": r.median("files_s")} for r in rows if r.runs
    }
    outcomes = targets.evaluate(medians, {r.key: r.problems for r in rows})
    target_text = targets.targets_table(outcomes)
    rows_text = rows_table(rows)
    wall = time.perf_counter() - started
    info["loadavg_end"] = os.getloadavg()
    print(f"issue #8 targets (S3: {args.s3}, {args.runs} runs, medians; {wall / 60:.1f} min)")
    print(target_text)
    print()
    print(rows_text)
    result = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": info,
        "wall_seconds": wall,
        "datasets": {
            ds.name: {"files": len(ds.sizes), "bytes": ds.nbytes}
            for ds in (bench.small, bench.large, bench.checkpoint)
        },
        "targets": [o.to_json() for o in outcomes],
        "rows": [r.to_json() for r in rows],
        "extra": bench.extra,
        "targets_table": target_text,
        "rows_table": rows_text,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    draw(
        outcomes,
        args.png,
        f"issue #8 targets, S3={args.s3}, medians of {args.runs} runs, "
        f"{info['nproc']} cores, {time.strftime('%Y-%m-%d')}",
    )
    log(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
