"""Warm-up: Reservoir's metadata load and preload jobs against S3 directly, on one machine.

    python bench/warmup_bench.py            # defaults (about 4 minutes on 2 cores)
    python bench/warmup_bench.py --quick    # smoke run (tiny data sets, one run per row)

Starts a local cluster (etcd, a moto-based S3 server with injected first-byte latency, the
master and --workers workers), uploads a "small" data set (--files objects of 1-4 KB in
--dirs directories two levels deep) and a "large" one (--preload-mb MiB in 16 MiB files),
then measures, in every one of --runs runs:

  metadata      boto3 list_objects_v2 (recursive, no delimiter) and a Delimiter walk of
                small/, against client.load_metadata() of the same directory (the first
                load after a fresh mount, then a re-sync), and ls of every directory after it
  preload       boto3 get_object of every file (--concurrency threads) against
                submit_load() + watch_job() of the whole mount into empty worker caches
  first epoch   reading every file right after the preload against a cold epoch (workers
                restarted, mount remounted: no metadata, no cached blocks)

and prints a table (medians of --runs runs, with min/max) and writes all raw numbers to
--json. See bench/README.md for how to read it.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import functools
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed.datasets import BUCKET, MOUNT, Dataset, upload  # noqa: E402 - bench/ is not a package
from speed.results import MiB, Row, Run, log, machine_info  # noqa: E402

HERE = Path(__file__).resolve().parent
LARGE_FILE = 16 * MiB
FAN_OUT = 5  # leaf directories per top-level directory of the small data set

META, PRELOAD, EPOCH = "metadata", "preload", "first epoch"
WARN = " (!) "  # marks a row note that says the run did not measure what it should
BASELINES = {
    META: "boto3 list_objects_v2, recursive",
    PRELOAD: "boto3 get_object",
    EPOCH: "reservoir cold epoch",
}


# ---- data sets ----------------------------------------------------------------------------


def leaf_dir(i: int) -> str:
    return f"p{i // FAN_OUT:02d}/q{i % FAN_OUT}"


def make_datasets(args: argparse.Namespace, rng: random.Random) -> tuple[Dataset, Dataset]:
    large = {f"part-{i:04d}.bin": LARGE_FILE for i in range(max(1, args.preload_mb // 16))}
    small = {
        f"{leaf_dir(i % args.dirs)}/f-{i:06d}.bin": rng.randint(1024, 4096)
        for i in range(args.files)
    }
    out = []
    for name, sizes in (("large", large), ("small", small)):
        order = sorted(sizes)
        rng.shuffle(order)
        out.append(Dataset(name, f"{name}/", sizes, {}, order))
    return out[0], out[1]


def small_dirs(ds: Dataset) -> list[str]:
    """Every directory of the small data set below (and including) its root, as paths
    relative to the root ("" is the root)."""
    found = {""}
    for name in ds.sizes:
        parts = name.split("/")[:-1]
        found.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return sorted(found)


def merged(*datasets: Dataset) -> Dataset:
    """One data set holding them all, names relative to the bucket root."""
    sizes = {ds.prefix + n: size for ds in datasets for n, size in ds.sizes.items()}
    return Dataset("all", "", sizes, {}, sorted(sizes))


# ---- measuring ----------------------------------------------------------------------------


class Bench:
    """The measuring code warmup_bench shares no more with read_bench: rows, S3 request
    counts, worker stats, restarts, and the large/small epoch readers."""

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

    def restart_workers(self) -> None:
        """Empty caches: stop every worker and start it again (same id and port)."""
        for name in self.cluster.worker_names():
            self.cluster.stop(name)
        for name in self.cluster.worker_names():
            self.cluster.start_worker(int(name.removeprefix("worker")))

    @staticmethod
    def _stats(client: Any) -> Callable[[], dict[str, int]]:
        def stats() -> dict[str, int]:
            total: dict[str, int] = {}
            for s in client.worker_stats():
                for key in ("hits", "misses", "ufs_gets", "bytes_from_ufs", "evictions"):
                    total[key] = total.get(key, 0) + int(getattr(s, key))
            return total

        return stats

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

    def _verify(self, client: Any, datasets: list[Dataset]) -> None:
        """Untimed: the bytes Reservoir returns are the bytes uploaded (a sample)."""
        import crc32c

        rng = random.Random(1)
        for ds in datasets:
            names = rng.sample(
                sorted(ds.sizes), min(len(ds.sizes), 50 if ds.name == "small" else 2)
            )
            datas = client.read_many([f"{MOUNT}/{ds.name}/{n}" for n in names])
            for name, data in zip(names, datas, strict=True):
                if crc32c.crc32c(data) != ds.crcs[name]:
                    raise RuntimeError(f"{ds.name}/{name}: content differs from the upload")
        log("content check passed")


class WarmupBench(Bench):
    """read_bench's Bench (measure, _reader, _stats, restart_workers) plus the warm-up rows."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.extra = {"load_metadata": [], "preload_jobs": [], "ls": []}
        conc, epoch = args.concurrency, self._epoch_how()
        cold = "workers restarted, " + (
            "remounted (stats go to S3)" if args.cold_metadata == "drop" else "metadata kept"
        )
        self.by_name = {
            name: self.row(section, name, note)
            for section, name, note in (
                (META, BASELINES[META], "one paginated listing, 1000 keys per page"),
                (META, "boto3 Delimiter walk", "one listing per directory, one after another"),
                (META, "reservoir load_metadata, first", "after a fresh mount (empty etcd)"),
                (META, "reservoir load_metadata, re-sync", "again: lists S3, rewrites etcd"),
                (META, "reservoir ls every directory", "after the load, new client"),
                (PRELOAD, BASELINES[PRELOAD], f"every file, {conc} threads"),
                (PRELOAD, "reservoir submit_load+watch_job", "whole mount, empty caches"),
                (EPOCH, "reservoir epoch after preload", epoch),
                (EPOCH, BASELINES[EPOCH], f"{epoch}; {cold}"),
            )
        }

    def s3_delta(self, before: dict[str, int]) -> dict[str, int]:
        after = self.s3_counts()
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
        return {k: v for k, v in sorted(delta.items()) if v}

    def boto3(self) -> Any:
        import boto3
        from botocore.config import Config

        from reservoir.local.cluster import DEV_CREDENTIALS

        return boto3.client(
            "s3",
            endpoint_url=self.cluster.s3_endpoint,
            aws_access_key_id=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=DEV_CREDENTIALS["AWS_DEFAULT_REGION"],
            config=Config(
                max_pool_connections=self.args.concurrency, s3={"addressing_style": "path"}
            ),
        )

    def timed_entries(self, what: str, fn: Callable[[], int]) -> Run:
        """Times fn() -> entries seen; S3 requests counted at the server."""
        before = self.s3_counts()
        start = time.perf_counter()
        entries = fn()
        seconds = time.perf_counter() - start
        run = Run(seconds, 0, entries, self.s3_delta(before))
        log(f"  {what}: {seconds:7.2f}s {run.files_s:9.0f} entries/s  s3={run.s3}")
        return run

    def remount(self, client: Any) -> None:
        """A fresh mount: unmounting drops every inode below it from etcd."""
        if any(m.path == MOUNT for m in client.mounts()):
            client.unmount(MOUNT)
        client.mount(
            MOUNT, f"s3://{BUCKET}/", credentials="env", endpoint_url=self.cluster.s3_endpoint
        )

    # ---- 1. metadata ---------------------------------------------------------------------

    def metadata(self, small: Dataset, run: int) -> None:
        from reservoir.client import Client

        rows = self.by_name
        s3 = self.boto3()

        def recursive() -> int:
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=small.prefix)
            return sum(len(p.get("Contents", ())) for p in pages)

        def walk() -> int:
            entries, todo = 0, [small.prefix]
            while todo:
                prefix = todo.pop()
                pages = s3.get_paginator("list_objects_v2").paginate(
                    Bucket=BUCKET, Prefix=prefix, Delimiter="/"
                )
                for page in pages:
                    entries += len(page.get("Contents", ()))
                    subdirs = [c["Prefix"] for c in page.get("CommonPrefixes", ())]
                    entries += len(subdirs)
                    todo.extend(subdirs)
            return entries

        dirs = small_dirs(small)
        log(
            f"metadata (run {run + 1}/{self.args.runs}): {len(small.sizes)} files, {len(dirs)} dirs"
        )
        expected = {
            BASELINES[META]: len(small.sizes),
            "boto3 Delimiter walk": len(small.sizes) + len(dirs) - 1,
        }
        for name, fn in ((BASELINES[META], recursive), ("boto3 Delimiter walk", walk)):
            r = self.timed_entries(name, fn)
            if r.files != expected[name]:
                raise RuntimeError(f"{name}: {r.files} entries, expected {expected[name]}")
            rows[name].runs.append(r)

        root = f"{MOUNT}/{small.name}"
        with Client(self.cluster.master_address) as client:
            self.remount(client)
            for name in ("reservoir load_metadata, first", "reservoir load_metadata, re-sync"):
                last: list[Any] = []
                r = self.timed_entries(name, functools.partial(_listed, client, root, last))
                if r.files != expected["boto3 Delimiter walk"] or not last[0].done:
                    raise RuntimeError(f"{name}: {last[0]}")
                rows[name].runs.append(r)
                p = last[0]
                self.extra["load_metadata"].append(
                    {
                        "run": run,
                        "row": name,
                        "listed": p.listed,
                        "written": p.written,
                        "removed": p.removed,
                        "elapsed_ms": p.elapsed_ms,
                        "progress_messages": len(last) - 1,
                    }
                )
        with Client(self.cluster.master_address) as client:

            def ls_all() -> int:
                files = entries = 0
                for d in dirs:
                    listing = client.ls(f"{root}/{d}".rstrip("/"))
                    entries += len(listing)
                    files += sum(1 for e in listing if not e.is_dir)
                if files != len(small.sizes):
                    raise RuntimeError(f"ls found {files} files, expected {len(small.sizes)}")
                return entries

            name = "reservoir ls every directory"
            r = self.timed_entries(name, ls_all)
            rows[name].runs.append(r)
            if r.s3:
                _warn(rows[name], "S3 requests: ls not served from etcd")
            self.extra["ls"].append({"run": run, "directories": len(dirs), "s3": r.s3})

    # ---- 2. preload, 3. first epoch ----------------------------------------------------------

    def boto3_get(self, ds: Dataset) -> Run:
        s3 = self.boto3()

        def get(key: str) -> int:
            body = s3.get_object(Bucket=BUCKET, Key=key)["Body"]
            try:
                return len(body.read())
            finally:
                body.close()

        with cf.ThreadPoolExecutor(self.args.concurrency) as pool:

            def read_all() -> tuple[int, int]:
                sizes = list(pool.map(get, ds.order))
                return sum(sizes), len(sizes)

            return self.measure(ds, read_all)

    def preload(self, client: Any, ds: Dataset, run: int) -> Run:
        """submit_load + watch_job of the whole mount; the caches must start empty."""
        before_report = client.report(MOUNT)
        stats = self._stats(client)
        s3_before, w_before = self.s3_counts(), stats()
        blocks_known: list[float] = []  # when the job's metadata sync ended (0.25 s polls)

        def progress(j: Any) -> None:
            if j.total_blocks and not blocks_known:
                blocks_known.append(time.perf_counter() - start)

        start = time.perf_counter()
        job = client.submit_load(MOUNT)
        job = client.watch_job(job.id, progress=progress)
        seconds = time.perf_counter() - start
        run_ = Run(
            seconds,
            job.done_bytes,
            job.total_files,
            self.s3_delta(s3_before),
            {k: v - w_before.get(k, 0) for k, v in stats().items()},
        )
        meta = f"{blocks_known[0]:.1f}s" if blocks_known else "?"
        log(
            f"  preload: {seconds:7.2f}s {run_.mb_s:9.1f} MB/s  state={job.state} "
            f"blocks={job.done_blocks}/{job.total_blocks} (metadata sync ~{meta}) s3={run_.s3}"
        )
        if job.state != "completed" or job.done_bytes != ds.nbytes or job.failed_blocks:
            raise RuntimeError(f"preload job: {job}")
        # Untimed: how long until Report (the master's location table) shows it all cached.
        lag_start, report = time.perf_counter(), client.report(MOUNT)
        while report.cached_bytes < report.bytes and time.perf_counter() - lag_start < 10:
            time.sleep(0.05)
            report = client.report(MOUNT)
        self.extra["preload_jobs"].append(
            {
                "run": run,
                "job_id": job.id,
                "total_files": job.total_files,
                "total_blocks": job.total_blocks,
                "done_bytes": job.done_bytes,
                "job_ms": job.updated_ms - job.created_ms,
                "metadata_phase_s": blocks_known[0] if blocks_known else None,
                "cached_bytes_before": before_report.cached_bytes,
                "cached_bytes_after": report.cached_bytes,
                "bytes": report.bytes,
                "report_lag_s": time.perf_counter() - lag_start,
            }
        )
        run_.workers["cached_bytes_before"] = before_report.cached_bytes
        return run_

    def epoch(self, client: Any, large: Dataset, small: Dataset, everything: Dataset) -> Run:
        """Every file once: read() per large file, then read_many() batches of small ones."""
        readers = [self._reader(client, large), self._reader(client, small)]

        def read_all() -> tuple[int, int]:
            done = [reader() for reader in readers]
            return sum(n for n, _ in done), sum(f for _, f in done)

        return self.measure(everything, read_all, self._stats(client))

    def warmup(self, large: Dataset, small: Dataset, run: int) -> None:
        from reservoir.client import Client
        from reservoir.common.errors import ReservoirError

        everything = merged(large, small)
        conc = self.args.concurrency
        boto, load, warm, cold = (
            self.by_name[name]
            for name in (
                BASELINES[PRELOAD],
                "reservoir submit_load+watch_job",
                "reservoir epoch after preload",
                BASELINES[EPOCH],
            )
        )
        log(f"preload (run {run + 1}/{self.args.runs}): boto3 get_object, {conc} threads")
        boto.runs.append(self.boto3_get(everything))

        if run:
            log("restarting workers (empty caches)")
            self.restart_workers()
        with Client(self.cluster.master_address) as client:
            log(f"preload (run {run + 1}/{self.args.runs}): submit_load {MOUNT}")
            load.runs.append(self.preload(client, everything, run))
        with Client(self.cluster.master_address) as client:
            log(f"first epoch (run {run + 1}/{self.args.runs}): after preload")
            warm.runs.append(self.epoch(client, large, small, everything))
            if not run:
                self._verify(client, [large, small])
        if load.runs[-1].workers["cached_bytes_before"]:
            _warn(load, "NOT COLD: Report showed cached bytes before the job")
        if warm.runs[-1].s3.get("GET", 0) or warm.runs[-1].workers.get("misses", 0):
            _warn(warm, "NOT WARM: S3 GETs or worker misses")

        log("restarting workers" + (", remounting" if self.args.cold_metadata == "drop" else ""))
        self.restart_workers()
        with Client(self.cluster.master_address) as client:
            if self.args.cold_metadata == "drop":
                self.remount(client)
            log(f"first epoch (run {run + 1}/{self.args.runs}): cold")
            try:
                cold.runs.append(self.epoch(client, large, small, everything))
            except ReservoirError as exc:  # reported in the table, the other rows still count
                log(f"  FAILED: {type(exc).__name__}: {exc}")
                _warn(cold, f"FAILED: {type(exc).__name__}: {exc}")
                self.extra.setdefault("failures", []).append(
                    {"run": run, "row": cold.system, "error": f"{type(exc).__name__}: {exc}"}
                )
                return
        if not cold.runs[-1].workers.get("misses", 0):
            _warn(cold, "NOT COLD: no worker misses")

    def _epoch_how(self) -> str:
        a = self.args
        return (
            f"large: read() {a.reservoir_large_threads} threads; small: read_many() of "
            f"{a.batch}, {a.reservoir_small_threads} threads"
        )


def _warn(row: Row, message: str) -> None:
    if WARN + message not in row.note:
        row.note += WARN + message


def _listed(client: Any, path: str, out: list[Any]) -> int:
    progress = client.load_metadata(path, recursive=True, progress=out.append)
    out.insert(0, progress)
    return int(progress.listed)


# ---- output -------------------------------------------------------------------------------


def _counts(row: Row, kind: str) -> str:
    values = sorted({r.s3.get(kind, 0) for r in row.runs})
    return "/".join(str(v) for v in values)


def table(rows: list[Row]) -> str:
    def rate(row: Row, run: Run | None = None) -> float:
        if row.dataset == META:
            return run.files_s if run else row.median("files_s")
        return run.mb_s if run else row.median("mb_s")

    base = {r.dataset: rate(r) for r in rows if r.system == BASELINES[r.dataset] and r.runs}
    header = (
        f"{'row':<36} {'runs':>4} {'seconds':>8} {'(min-max)':>13} {'rate':>9} {'unit':<9} "
        f"{'GET':>6} {'HEAD':>6} {'LIST':>6} {'x base':>7}"
    )
    lines = [header, "-" * len(header)]
    for section in (META, PRELOAD, EPOCH):
        lines.append(f"{section}:")
        for r in (r for r in rows if r.dataset == section):
            if not r.runs:
                lines.append(f"  {r.system:<34} {0:>4}   failed (see warnings)")
                continue
            secs = [x.seconds for x in r.runs]
            spread = f"{min(secs):.2f}-{max(secs):.2f}"
            ratio = "base" if r.system == BASELINES[section] else "-"
            if ratio == "-" and section in base:
                ratio = f"{rate(r) / base[section]:.2f}"
            unit = "entries/s" if section == META else "MB/s"
            lines.append(
                f"  {r.system:<34} {len(r.runs):>4} {r.median('seconds'):>8.2f} {spread:>13} "
                f"{rate(r):>9.1f} {unit:<9} {_counts(r, 'GET'):>6} {_counts(r, 'HEAD'):>6} "
                f"{_counts(r, 'LIST'):>6} {ratio:>7}"
            )
    warnings = [
        f"  {r.system}: {'; '.join(r.note.split(WARN)[1:])}" for r in rows if WARN in r.note
    ]
    if warnings:
        lines += ["warnings:", *warnings]
    return "\n".join(lines)


# ---- main ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    # 2000, not 3000: moto serves ~100-150 small GETs/s here, and each run reads the small
    # files from S3 three times (boto3, preload, cold epoch); 3000 makes a default run ~7 min.
    p.add_argument("--files", type=int, default=2_000, help="small files (1-4 KB)")
    p.add_argument("--dirs", type=int, default=30, help="leaf directories of the small files")
    p.add_argument("--preload-mb", type=int, default=256, help="total, in 16 MiB files")
    p.add_argument("--s3-latency-ms", type=float, default=20.0, help="first-byte latency")
    p.add_argument("--concurrency", type=int, default=16, help="threads for boto3 GETs")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256, help="paths per read_many() call")
    p.add_argument("--reservoir-small-threads", type=int, default=4)
    p.add_argument("--reservoir-large-threads", type=int, default=4)
    p.add_argument(
        "--cold-metadata",
        choices=("drop", "keep"),
        default="keep",
        help="cold epoch: keep = only restart workers (metadata stays in etcd), "
        "drop = also remount (no metadata: every file is stat'ed against S3)",
    )
    p.add_argument("--capacity", default="1GiB", help="cache capacity per worker")
    p.add_argument("--json", type=Path, default=HERE / "results" / "warmup_bench.json")
    p.add_argument("--state-dir", type=Path, default=None, help="default: a temp dir")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one run: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        args.files, args.dirs, args.preload_mb, args.runs = 300, 10, 32, 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

    for key, value in DEV_CREDENTIALS.items():
        os.environ.setdefault(key, value)
    rng = random.Random(args.seed)
    info = machine_info()
    log(f"machine: {info['nproc']} cpus, load {info['loadavg']}")

    own_state = args.state_dir is None
    state_dir = Path(tempfile.mkdtemp(prefix="reservoir-warmup-")) if own_state else args.state_dir
    bench = WarmupBench(args)
    large, small = make_datasets(args, rng)
    started = time.perf_counter()
    try:
        log(f"starting cluster ({args.workers} workers) in {state_dir}")
        bench.cluster = LocalCluster.up(
            state_dir, workers=args.workers, s3_latency_ms=0, capacity=args.capacity
        )
        s3 = bench.cluster.s3_client()
        s3.create_bucket(Bucket=BUCKET)
        upload_s: dict[str, float] = {}
        for ds in (large, small):
            log(f"uploading {ds.name}: {len(ds.sizes)} files, {ds.nbytes / MiB:.1f} MiB")
            start = time.perf_counter()
            upload(s3, ds, [ds.prefix], 16, args.seed)
            upload_s[ds.name] = time.perf_counter() - start
            log(f"  {upload_s[ds.name]:.1f}s")
        bench.extra["upload_seconds"] = upload_s
        bench.cluster.s3_config(latency_ms=args.s3_latency_ms)

        for run in range(args.runs):
            bench.metadata(small, run)
            bench.warmup(large, small, run)
    finally:
        if bench.cluster is not None:
            log("stopping cluster")
            bench.cluster.down()
        if own_state:
            shutil.rmtree(state_dir, ignore_errors=True)

    order = {META: 0, PRELOAD: 1, EPOCH: 2}
    rows = sorted(bench.rows, key=lambda r: order[r.dataset])  # stable: system order kept
    text = table(rows)
    print(text)
    info["loadavg_end"] = os.getloadavg()
    bench.extra["wall_seconds"] = time.perf_counter() - started
    result = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": info,
        "datasets": {
            ds.name: {
                "files": len(ds.sizes),
                "bytes": ds.nbytes,
                "prefix": ds.prefix,
                **({"directories": len(small_dirs(ds))} if ds is small else {}),
            }
            for ds in (large, small)
        },
        "rows": [
            r.to_json() if r.runs else {"dataset": r.dataset, "system": r.system, "note": r.note}
            for r in rows
        ],
        "extra": bench.extra,
        "table": text,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
