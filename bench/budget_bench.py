"""Cluster-wide under-store budgets (issue #33): the GET rate the S3 server sees against a
mount's `max_requests_per_s`, with three workers reading cold; and the latency of
foreground reads with and without a preload (a load job) of the same mount running.

Part 1: for each limit (and none), 24 threads of `Client.read` read distinct cold files
(16 blocks of 4 KiB each) for a warm-up and then `--windows` windows of `--window-s`;
the S3 server's GET timestamps give the rate in each window.

Part 2: a mount limited to `--fg-limit` GETs/s; foreground readers read single-block
cold files at a steady pace (`--fg-rate` reads/s in all, below the limit), each read
timed; alone, and while a load job of many other files of the same mount runs, in
`--rounds` alternating rounds. The target: foreground p99 with the preload <= 1.2x
without.

    python bench/budget_bench.py                    # ~2 minutes
    python bench/budget_bench.py --limits 200 --windows 3 --window-s 10

Writes a table to stdout, bench/results/budget_bench.json and budget_bench.png.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
BLOCK = 4096
BLOCKS_PER_FILE = 16


def _put(cluster: Any, bucket: str, prefix: str, files: int, blocks: int) -> list[str]:
    s3 = cluster.s3_client()
    names = [f"f{n:05d}.bin" for n in range(files)]
    body = os.urandom(BLOCK * blocks)
    for name in names:
        # Distinct bytes per file are not needed: blocks are keyed by file, not content.
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=body)
    return names


def _mount(client: Any, cluster: Any, bucket: str, prefix: str, limit: int) -> str:
    root = f"/bench/{prefix}"
    client.mount(
        root,
        f"s3://{bucket}/{prefix}/",
        endpoint_url=cluster.s3_endpoint,
        block_size=BLOCK,
        max_requests_per_s=limit,
    )
    client.ls(root)
    return root


def _rate_run(
    cluster: Any, client: Any, bucket: str, limit: int, args: argparse.Namespace
) -> dict[str, Any]:
    seconds = args.warmup_s + args.windows * args.window_s
    # Enough cold blocks for the whole run at the limit (or at what the machine does).
    wanted = int((limit or 400) * seconds * 1.5)
    prefix = f"rate{limit}"
    names = _put(cluster, bucket, prefix, wanted // BLOCKS_PER_FILE + 1, BLOCKS_PER_FILE)
    root = _mount(client, cluster, bucket, prefix, limit)
    queue = iter(names)
    lock = threading.Lock()
    stop = threading.Event()
    failures: list[str] = []

    def read() -> None:
        while not stop.is_set():
            with lock:
                name = next(queue, None)
            if name is None:
                return
            try:
                client.read(f"{root}/{name}")
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=read, daemon=True) for _ in range(24)]
    for t in threads:
        t.start()
    time.sleep(args.warmup_s)
    start = time.time()
    time.sleep(args.windows * args.window_s + 0.3)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    times = cluster.s3_get_times(since=start)
    rates = [
        sum(1 for t in times if start + i * args.window_s <= t < start + (i + 1) * args.window_s)
        / args.window_s
        for i in range(args.windows)
    ]
    return {
        "limit": limit,
        "window_s": args.window_s,
        "rates": rates,
        "min": min(rates),
        "max": max(rates),
        "within_10pct": bool(limit) and all(abs(r - limit) <= 0.1 * limit for r in rates),
        "failed_reads": len(failures),
    }


def _foreground(
    client: Any, root: str, names: list[str], rate: float, seconds: float
) -> tuple[list[float], int]:
    """Reads `names` (single-block, cold) at `rate` reads/s in all, 8 threads; returns
    each read's latency and the count of failures."""
    latencies: list[float] = []
    failures = 0
    lock = threading.Lock()
    queue = iter(names)
    begin = time.monotonic()
    count = int(rate * seconds)
    issued = [0]

    def reader() -> None:
        nonlocal failures
        while True:
            with lock:
                n = issued[0]
                if n >= count:
                    return
                issued[0] += 1
                name = next(queue)
            due = begin + n / rate  # open loop: a slow read does not slow the others
            time.sleep(max(0.0, due - time.monotonic()))
            t0 = time.perf_counter()
            try:
                client.read(f"{root}/{name}")
            except Exception:
                with lock:
                    failures += 1
                continue
            with lock:
                latencies.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, failures


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _preload_run(
    cluster: Any, client: Any, bucket: str, args: argparse.Namespace
) -> dict[str, Any]:
    """`--rounds` rounds of (foreground alone, foreground with a preload running),
    latencies pooled per condition: alternating spreads the machine's noise over both."""
    count = int(args.fg_rate * args.fg_seconds)
    fg_names = _put(cluster, bucket, "fg", (2 * args.rounds + 1) * count + 20, 1)
    for r in range(args.rounds):
        _put(cluster, bucket, f"fg/preload{r}", args.preload_files, BLOCKS_PER_FILE)
    root = _mount(client, cluster, bucket, "fg", args.fg_limit)
    for r in range(args.rounds):
        client.ls(f"{root}/preload{r}")
    names = iter(fg_names)

    def take(n: int) -> list[str]:
        return [next(names) for _ in range(n)]

    # Every worker holds a lease of the new mount before anything is timed.
    _foreground(client, root, take(20), 10.0, 2.0)
    alone: list[float] = []
    loaded: list[float] = []
    # Control: reads of blocks already cached (no GET, so no budget), alone and with the
    # preload: what the preload costs a read through the machine's CPU, not the gate.
    cached = take(count)
    _foreground(client, root, cached, args.fg_rate, args.fg_seconds)
    hits_alone: list[float] = []
    hits_loaded: list[float] = []
    failed = 0
    preload_gets = 0
    for r in range(args.rounds):
        lat, bad = _foreground(client, root, take(count), args.fg_rate, args.fg_seconds)
        alone += lat
        failed += bad
        hits_alone += _foreground(client, root, cached, args.fg_rate, args.fg_seconds / 2)[0]
        job = client.submit_load(f"{root}/preload{r}")
        time.sleep(1.0)  # the job is running
        hits_loaded += _foreground(client, root, cached, args.fg_rate, args.fg_seconds / 2)[0]
        gets_before = cluster.s3_counts().get("GET", 0)
        lat, bad = _foreground(client, root, take(count), args.fg_rate, args.fg_seconds)
        preload_gets += cluster.s3_counts().get("GET", 0) - gets_before - len(lat) - bad
        loaded += lat
        failed += bad
        state = client.job(job.id)
        client.cancel_job(job.id)
        print(
            f"round {r + 1}: p99 alone {_p(alone, 99) * 1000:.1f} ms, with preload "
            f"{_p(loaded, 99) * 1000:.1f} ms (pooled so far); preload blocks done "
            f"{state.done_blocks}, failed {state.failed_blocks}",
            flush=True,
        )
    p99_alone, p99_loaded = _p(alone, 99), _p(loaded, 99)
    print("slowest alone (ms):", [round(x * 1000) for x in sorted(alone)[-8:]])
    print("slowest with preload (ms):", [round(x * 1000) for x in sorted(loaded)[-8:]])
    print(
        f"control, cached reads (no GET): p99 {_p(hits_alone, 99) * 1000:.1f} -> "
        f"{_p(hits_loaded, 99) * 1000:.1f} ms with the preload"
    )
    return {
        "limit": args.fg_limit,
        "fg_rate": args.fg_rate,
        "rounds": args.rounds,
        "reads_per_condition": len(alone),
        "alone_p50_ms": _p(alone, 50) * 1000,
        "alone_p99_ms": p99_alone * 1000,
        "with_preload_p50_ms": _p(loaded, 50) * 1000,
        "with_preload_p99_ms": p99_loaded * 1000,
        "p99_ratio": p99_loaded / p99_alone,
        "target_met": p99_loaded <= 1.2 * p99_alone,
        "preload_gets_during_fg": preload_gets,
        "failed_reads": failed,
        "cached_alone_p99_ms": _p(hits_alone, 99) * 1000,
        "cached_with_preload_p99_ms": _p(hits_loaded, 99) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limits", type=int, nargs="*", default=[50, 100, 200, 0])
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--window-s", type=float, default=5.0)
    parser.add_argument("--fg-limit", type=int, default=100)
    parser.add_argument("--fg-rate", type=float, default=30.0)
    parser.add_argument("--fg-seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--preload-files", type=int, default=60)
    parser.add_argument("--s3-latency-ms", type=float, default=10.0)
    args = parser.parse_args()

    from reservoir.client import Client
    from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

    os.environ.update(DEV_CREDENTIALS)
    with tempfile.TemporaryDirectory(prefix="budget-bench-") as tmp:
        cluster = LocalCluster.up(Path(tmp), workers=3, s3_latency_ms=args.s3_latency_ms)
        try:
            with Client(cluster.master_address) as client:
                cluster.s3_client().create_bucket(Bucket="budget")
                rates = [_rate_run(cluster, client, "budget", n, args) for n in args.limits]
                preload = _preload_run(cluster, client, "budget", args)
        finally:
            cluster.down()

    print(f"{'limit GETs/s':>13} {'window rates (GETs/s)':>34} {'within 10 %':>12} {'failed':>7}")
    for r in rates:
        shown = " ".join(f"{x:6.1f}" for x in r["rates"])
        within = ("yes" if r["within_10pct"] else "NO") if r["limit"] else "-"
        print(f"{r['limit'] or 'none':>13} {shown:>34} {within:>12} {r['failed_reads']:>7}")
    print()
    print(
        f"foreground {preload['fg_rate']:g} reads/s, limit {preload['limit']} GETs/s: "
        f"p50 {preload['alone_p50_ms']:.1f} -> {preload['with_preload_p50_ms']:.1f} ms, "
        f"p99 {preload['alone_p99_ms']:.1f} -> {preload['with_preload_p99_ms']:.1f} ms "
        f"(x{preload['p99_ratio']:.2f}, target <= 1.2: "
        f"{'met' if preload['target_met'] else 'NOT met'}); preload GETs meanwhile "
        f"{preload['preload_gets_during_fg']}, failed reads {preload['failed_reads']}"
    )
    out = {"args": vars(args), "rates": rates, "preload": preload}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "budget_bench.json").write_text(json.dumps(out, indent=2) + "\n")
    _plot(rates, preload)


def _plot(rates: list[dict[str, Any]], preload: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    limited = [r for r in rates if r["limit"]]
    for i, r in enumerate(limited):
        left.scatter([r["limit"]] * len(r["rates"]), r["rates"], color="#1565c0", zorder=3)
        left.plot(
            [r["limit"] * 0.9, r["limit"] * 1.1], [r["limit"]] * 2, color="black", linewidth=1
        )
        if i == 0:
            left.scatter([], [], color="#1565c0", label="GETs/s seen by S3, per window")
    top = max([r["limit"] for r in limited] + [0]) * 1.2 or 1
    left.plot([0, top], [0, top], color="grey", linestyle="--", label="= limit")
    unlimited = [r for r in rates if not r["limit"]]
    if unlimited:
        left.axhline(max(unlimited[0]["rates"]), color="#c62828", linestyle=":", label="no limit")
    left.set_xlabel("max_requests_per_s (3 workers)")
    left.set_ylabel("GETs/s at the S3 server")
    left.legend(fontsize=8)
    left.set_title("Achieved GET rate vs limit", fontsize=10)
    labels = ["p50\nalone", "p50\n+ preload", "p99\nalone", "p99\n+ preload"]
    labels += ["cached p99\nalone", "cached p99\n+ preload"]
    values = [
        preload["alone_p50_ms"],
        preload["with_preload_p50_ms"],
        preload["alone_p99_ms"],
        preload["with_preload_p99_ms"],
        preload["cached_alone_p99_ms"],
        preload["cached_with_preload_p99_ms"],
    ]
    colors = ["#90caf9", "#1565c0", "#ffcc80", "#ef6c00", "#c5e1a5", "#558b2f"]
    right.bar(labels, values, color=colors)
    right.tick_params(axis="x", labelsize=7)
    right.axhline(1.2 * preload["alone_p99_ms"], color="black", linewidth=1, label="1.2x p99 alone")
    right.set_ylabel("foreground read latency (ms)")
    right.legend(fontsize=8)
    right.set_title(
        f"Foreground reads with a preload (x{preload['p99_ratio']:.2f} at p99)", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(RESULTS / "budget_bench.png", dpi=100)


if __name__ == "__main__":
    main()
