"""Worker memory under churn: RSS per shuffled epoch against the worker's capacity.

One worker with `--capacity-mb` of cache reads a data set `--data-mb` large (files of two
blocks) in shuffled epochs through 8 reader threads, so nearly every read evicts. After
each epoch the worker's RSS is sampled from /proc. Each allocator profile runs on a fresh
cluster: `bounded` is the worker's default (a fixed 256 KiB mmap threshold, 16 MiB trim
threshold), `heap` is the client's tuning (1 GiB thresholds: large buffers reused from
the heap). Writes a table to stdout, JSON and a PNG plot to bench/results/.

    python bench/worker_memory.py            # ~2 min: 64 MiB capacity, 300 MiB, 12 epochs
    python bench/worker_memory.py --quick    # ~30 s
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MiB = 1 << 20
RESULTS = Path(__file__).parent / "results"
PROFILES = {
    "bounded": {},  # the worker's defaults
    "heap": {
        "RESERVOIR_WORKER_MMAP_THRESHOLD": str(1 << 30),
        "RESERVOIR_WORKER_TRIM_THRESHOLD": str(1 << 30),
    },
}


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def run_profile(name: str, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    from reservoir.client import Client
    from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

    os.environ.update(DEV_CREDENTIALS)
    state = Path(tempfile.mkdtemp(prefix="wmem-"))
    cluster = LocalCluster.up(state, workers=1, capacity=f"{args.capacity_mb}MiB", env=env)
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="wmem")
        block = args.block_kb * 1024
        blob = os.urandom(2 * block)
        names = [f"f{i}" for i in range(args.data_mb * MiB // (2 * block))]
        for i, n in enumerate(names):
            s3.put_object(Bucket="wmem", Key=f"d/{n}", Body=blob[i % 97 :] + blob[: i % 97])
        pid = cluster.processes["worker1"].pid
        idle = rss(pid)
        epochs: list[dict[str, float]] = []
        with Client(cluster.master_address) as c, cf.ThreadPoolExecutor(8) as pool:
            c.mount("/wmem", "s3://wmem/d/", endpoint_url=cluster.s3_endpoint, block_size=block)
            paths = [f"/wmem/{n}" for n in names]
            rng = random.Random(1)
            for e in range(args.epochs):
                rng.shuffle(paths)
                start = time.perf_counter()
                total = sum(pool.map(lambda p: len(c.read(p)), paths))
                seconds = time.perf_counter() - start
                epochs.append({"epoch": e, "rss": rss(pid), "seconds": seconds, "bytes": total})
                print(
                    f"  {name} epoch {e:2d}: rss {epochs[-1]['rss'] / MiB:6.1f} MiB "
                    f"{total / MiB / seconds:7.1f} MB/s",
                    file=sys.stderr,
                )
        return {"profile": name, "env": env, "idle_rss": idle, "epochs": epochs}
    finally:
        cluster.down()


def table(results: list[dict[str, Any]], capacity: int) -> str:
    lines = [
        f"{'profile':<8} {'idle MiB':>9} {'peak MiB':>9} {'last MiB':>9} "
        f"{'peak-capacity':>14} {'median MB/s':>12}",
        "-" * 66,
    ]
    for r in results:
        peak = max(e["rss"] for e in r["epochs"])
        speeds = sorted(e["bytes"] / MiB / e["seconds"] for e in r["epochs"])
        lines.append(
            f"{r['profile']:<8} {r['idle_rss'] / MiB:>9.1f} {peak / MiB:>9.1f} "
            f"{r['epochs'][-1]['rss'] / MiB:>9.1f} {(peak - capacity) / MiB:>14.1f} "
            f"{speeds[len(speeds) // 2]:>12.1f}"
        )
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], capacity: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        ax.plot(
            [e["epoch"] + 1 for e in r["epochs"]],
            [e["rss"] / MiB for e in r["epochs"]],
            marker="o",
            label=r["profile"],
        )
    ax.axhline(capacity / MiB, color="grey", linestyle=":", label="capacity")
    ax.axhline((capacity + 128 * MiB) / MiB, color="red", linestyle="--", label="bound")
    ax.set_xlabel("shuffled epoch")
    ax.set_ylabel("worker RSS (MiB)")
    ax.set_title("Worker memory under churn")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--capacity-mb", type=int, default=64)
    p.add_argument("--data-mb", type=int, default=300)
    p.add_argument("--block-kb", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--quick", action="store_true", help="128 MiB of data, 4 epochs")
    p.add_argument("--json", type=Path, default=RESULTS / "worker_memory.json")
    p.add_argument("--png", type=Path, default=RESULTS / "worker_memory.png")
    args = p.parse_args(argv)
    if args.quick:
        args.data_mb, args.epochs = 128, 4
    capacity = args.capacity_mb * MiB
    results = [run_profile(name, env, args) for name, env in PROFILES.items()]
    print(table(results, capacity))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results})
    )
    plot(results, capacity, args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
