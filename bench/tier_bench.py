"""Warm read throughput by tier: the memory tier, the disk tier, and S3 read directly.

    python bench/tier_bench.py            # ~1-2 min: 96 MiB data set, 32 MiB memory tier
    python bench/tier_bench.py --quick    # 48 MiB over a 16 MiB memory tier, 1 run

Starts a local cluster (etcd, a moto-based S3 server with --s3-latency-ms first-byte
latency, the master, one worker with a memory tier of --memory and a disk tier under the
state dir), uploads a data set three times the memory tier, and measures, reading every
file once per run through the SDK with --concurrency threads:

  s3 direct      boto3 get_object per file (what a job reads without a cache)
  disk tier      the whole data set, loaded (a load job), after a worker restart (and its
                 start-up checksum check of the disk): memory is empty, every block
                 comes from the disk tier (verified by checksum as it is read)
  memory tier    a part of the data set that fits in memory, read once before (warm),
                 then four times

Each run of the disk row restarts the worker first, so each reads from disk again. Disk
reads of files written moments ago are mostly served by the kernel's page cache (a real
node's NVMe is slower than that on the first read; dropping caches needs root). Prints
a table (medians of --runs runs), writes JSON and a PNG to bench/results/.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from reservoir.client import Client
from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

MiB = 1 << 20
BUCKET = "tier-bench"
RESULTS = Path(__file__).parent / "results"


def _timed(read: Any, keys: list[str], concurrency: int) -> tuple[float, int]:
    started = time.perf_counter()
    with cf.ThreadPoolExecutor(concurrency) as pool:
        nbytes = sum(pool.map(read, keys))
    return time.perf_counter() - started, nbytes


def _tier_hits(c: Client) -> dict[str, int]:
    (stats,) = c.worker_stats()
    return {t.name: t.hits for t in stats.tiers} | {"ufs_gets": stats.ufs_gets}


def _restart_worker(cluster: LocalCluster, timeout_s: float = 120.0) -> None:
    """Restarts the worker and waits until it has verified the blocks it found on disk
    (a background check that would otherwise compete with the reads measured)."""
    log = Path(cluster.processes["worker1"].log)
    seen = log.read_text().count("disk_dir_verified") if log.exists() else 0
    cluster.stop("worker1")
    cluster.start_worker(1)
    deadline = time.monotonic() + timeout_s
    while log.read_text().count("disk_dir_verified") <= seen and time.monotonic() < deadline:
        time.sleep(0.1)


def measure(args: argparse.Namespace, state_dir: Path) -> list[dict[str, Any]]:
    os.environ.update(DEV_CREDENTIALS)
    memory = args.memory * MiB
    cluster = LocalCluster.up(
        state_dir,
        workers=1,
        capacity=str(memory),
        disk_capacity=str(4 * args.files * args.file_mib * MiB),
        s3_latency_ms=args.s3_latency_ms,
        lease_ttl=3,
    )
    rows: list[dict[str, Any]] = []
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket=BUCKET)
        names = [f"f{i:04d}" for i in range(args.files)]
        body = os.urandom(args.file_mib * MiB)
        for i, name in enumerate(names):
            s3.put_object(Bucket=BUCKET, Key=f"d/{name}", Body=body[i:] + body[:i])
        paths = [f"/tb/{n}" for n in names]
        # What fits in memory with room to spare (headroom for blocks in flight).
        fits = paths[: max(1, int(0.75 * memory) // (args.file_mib * MiB))]
        with Client(cluster.master_address) as c:
            c.mount("/tb", f"s3://{BUCKET}/d/", endpoint_url=cluster.s3_endpoint)
            job = c.watch_job(c.submit_load("/tb").id)
            assert job.state == "completed", job.errors

        def s3_read(name: str) -> int:
            return len(s3.get_object(Bucket=BUCKET, Key=f"d/{name}")["Body"].read())

        runs: dict[str, list[dict[str, Any]]] = {"s3 direct": [], "disk tier": [], "memory": []}
        for _ in range(args.runs):
            seconds, nbytes = _timed(s3_read, names, args.concurrency)
            runs["s3 direct"].append({"seconds": seconds, "bytes": nbytes})
            _restart_worker(cluster)  # memory empty; the disk tier is found again
            with Client(cluster.master_address) as c:
                before = _tier_hits(c)
                seconds, nbytes = _timed(lambda p: len(c.read(p)), paths, args.concurrency)
                after = _tier_hits(c)
                runs["disk tier"].append(
                    {"seconds": seconds, "bytes": nbytes}
                    | {f"{k}_delta": after[k] - before.get(k, 0) for k in after}
                )
                _timed(lambda p: len(c.read(p)), fits, args.concurrency)  # into memory
                before = _tier_hits(c)
                seconds, nbytes = _timed(lambda p: len(c.read(p)), fits * 4, args.concurrency)
                after = _tier_hits(c)
                runs["memory"].append(
                    {"seconds": seconds, "bytes": nbytes}
                    | {f"{k}_delta": after[k] - before.get(k, 0) for k in after}
                )
        for system, mine in runs.items():
            rates = [r["bytes"] / MiB / r["seconds"] for r in mine]
            rows.append(
                {
                    "system": system,
                    "mib_s": statistics.median(rates),
                    "min_mib_s": min(rates),
                    "max_mib_s": max(rates),
                    "runs": mine,
                }
            )
    finally:
        cluster.down()
    return rows


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    names = [r["system"] for r in rows]
    values = [r["mib_s"] for r in rows]
    errors = [
        [r["mib_s"] - r["min_mib_s"] for r in rows],
        [r["max_mib_s"] - r["mib_s"] for r in rows],
    ]
    ax.bar(names, values, yerr=errors, capsize=4, color=["#999999", "#4c72b0", "#55a868"])
    for x, v in enumerate(values):
        ax.text(x, v, f"{v:.0f}", ha="center", va="bottom")
    ax.set_ylabel("MiB/s (median; bars: min-max)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--memory", type=int, default=32, help="memory tier, MiB")
    p.add_argument("--files", type=int, default=24, help="files in the data set")
    p.add_argument("--file-mib", type=int, default=4, help="MiB per file (one block each)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--s3-latency-ms", type=float, default=20.0)
    p.add_argument("--quick", action="store_true", help="16 MiB memory, 12 files, 1 run")
    p.add_argument("--json", type=Path, default=RESULTS / "tier_bench.json")
    p.add_argument("--png", type=Path, default=RESULTS / "tier_bench.png")
    args = p.parse_args(argv)
    if args.quick:
        args.memory, args.files, args.runs = 16, 12, 1
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tier-bench-") as tmp:
        rows = measure(args, Path(tmp) / "cluster")
    dataset = args.files * args.file_mib
    title = (
        f"Warm reads by tier: {dataset} MiB data set, {args.memory} MiB memory tier, "
        f"{args.concurrency} threads"
    )
    print(title)
    print(f"{'source':<12} {'MiB/s':>9} {'min':>9} {'max':>9}  served by (last run)")
    for r in rows:
        last = r["runs"][-1]
        served = ", ".join(f"{k[:-6]} {v}" for k, v in last.items() if k.endswith("_delta"))
        print(
            f"{r['system']:<12} {r['mib_s']:>9.1f} {r['min_mib_s']:>9.1f} {r['max_mib_s']:>9.1f}"
            f"  {served or 'S3 GETs'}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "dataset_mib": dataset,
                "memory_mib": args.memory,
                "file_mib": args.file_mib,
                "concurrency": args.concurrency,
                "s3_latency_ms": args.s3_latency_ms,
                "rows": rows,
                "seconds": time.perf_counter() - started,
            },
            indent=2,
        )
    )
    plot(rows, args.png, title)
    print(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
