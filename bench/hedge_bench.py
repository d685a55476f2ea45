"""Warm read latency with one of three workers frozen (SIGSTOP) against none: what hedged
block reads (issue #32) make of a hung worker.

    python bench/hedge_bench.py                     # 4 threads, 3 passes over 240 files
    python bench/hedge_bench.py --passes 5 --threads 8 --json results/hedge.json

One local cluster (etcd, the S3 server, master, 3 workers; a long worker lease so the
frozen worker stays a member while it is measured). Each row makes a new client, reads
the data set once with every worker up (warm: every block cached, the client's first-byte
times known), then, for the frozen rows, SIGSTOPs `worker2` and times every read of
`--threads` threads reading the whole set `--passes` times in shuffled orders; the worker
gets SIGCONT before the next row. Rows by route: the data port in the reader's thread
(the default client), gRPC on the client's event loop (`data_port=False`); and, for
contrast, the frozen case with hedging off and a read deadline of `--deadline` seconds
(the user's report: one read took the 60 s deadline).

Prints the table on stdout, writes JSON and a PNG (default bench/results/hedge_bench.*).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster

BUCKET = "hedge-bench"
BLOCK = 64 * 1024
FROZEN = "worker2"
RESULTS = Path(__file__).parent / "results"


@dataclass
class Row:
    route: str
    frozen: bool
    hedging: bool
    reads: int
    failed: int
    wrong: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    hedged: int
    budget_ms: float | None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def dataset(cluster: LocalCluster, count: int) -> dict[str, bytes]:
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=BUCKET)
    rng = random.Random(32)
    files = {f"f{i:04d}": rng.randbytes(rng.randint(4_000, 3 * BLOCK)) for i in range(count)}
    for name, data in files.items():
        s3.put_object(Bucket=BUCKET, Key=f"d/{name}", Body=data)
    return files


def read_loop(
    client: Client, files: dict[str, bytes], passes: int, seed: int
) -> tuple[list[float], int, int]:
    """Seconds of each read, reads that failed, reads with other bytes than the store's."""
    names = list(files)
    rng = random.Random(seed)
    latencies: list[float] = []
    failed = wrong = 0
    for _ in range(passes):
        rng.shuffle(names)
        for name in names:
            start = time.perf_counter()
            try:
                data = client.read(f"/h/{name}")
            except Exception as exc:
                print(f"read /h/{name} failed: {exc}", file=sys.stderr)
                failed += 1
                continue
            latencies.append(time.perf_counter() - start)
            wrong += data != files[name]
    return latencies, failed, wrong


def one_row(
    cluster: LocalCluster,
    files: dict[str, bytes],
    args: argparse.Namespace,
    *,
    route: str,
    frozen: bool,
    hedging: bool,
) -> Row:
    settings: dict[str, Any] = {"data_port": route == "data port"}
    if not hedging:
        settings.update(read_hedge_after_s=0.0, read_timeout_s=args.deadline)
    with Client(config=cluster.client_config(**settings)) as client:
        for name, data in files.items():  # warm, with every worker up
            assert client.read(f"/h/{name}") == data
        pid = cluster.processes[FROZEN].pid
        if frozen:
            os.killpg(pid, signal.SIGSTOP)
        try:
            with ThreadPoolExecutor(args.threads) as pool:
                runs = list(
                    pool.map(
                        lambda seed: read_loop(client, files, args.passes, seed),
                        range(args.threads),
                    )
                )
        finally:
            if frozen:
                os.killpg(pid, signal.SIGCONT)
        stats = client.aio.hedge_stats
    latencies = [s for run in runs for s in run[0]]
    budget = stats.budget_s
    return Row(
        route=route,
        frozen=frozen,
        hedging=hedging,
        reads=len(latencies),
        failed=sum(run[1] for run in runs),
        wrong=sum(run[2] for run in runs),
        p50_ms=round(percentile(latencies, 0.50) * 1000, 2),
        p99_ms=round(percentile(latencies, 0.99) * 1000, 2),
        max_ms=round(max(latencies) * 1000, 2),
        hedged=stats.hedged,
        budget_ms=None if budget is None else round(budget * 1000, 1),
    )


def label(row: Row) -> str:
    state = "1 of 3 frozen" if row.frozen else "none frozen"
    return f"{row.route}, {state}" + ("" if row.hedging else ", no hedging")


def table(rows: list[Row]) -> str:
    head = f"{'row':<38} {'reads':>6} {'failed':>6} {'wrong':>5} {'p50 ms':>8} "
    head += f"{'p99 ms':>8} {'max ms':>9} {'hedged':>6} {'budget ms':>9}"
    lines = [head]
    for r in rows:
        budget = "off" if r.budget_ms is None else f"{r.budget_ms:.0f}"
        lines.append(
            f"{label(r):<38} {r.reads:>6} {r.failed:>6} {r.wrong:>5} {r.p50_ms:>8.2f} "
            f"{r.p99_ms:>8.2f} {r.max_ms:>9.1f} {r.hedged:>6} {budget:>9}"
        )
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4))
    names = [label(r).replace(", ", "\n") for r in rows]
    xs = range(len(rows))
    width = 0.27
    for offset, key, colour in ((-width, "p50_ms", "tab:blue"), (0, "p99_ms", "tab:orange")):
        values = [getattr(r, key) for r in rows]
        ax.bar([x + offset for x in xs], values, width, label=key[:3], color=colour)
    ax.bar([x + width for x in xs], [r.max_ms for r in rows], width, label="max", color="tab:red")
    ax.set_yscale("log")
    ax.set_ylabel("read latency, ms (log)")
    ax.set_xticks(list(xs), names, fontsize=7)
    ax.axhline(2000, color="black", linewidth=0.8, linestyle="--", label="2 s (issue #32)")
    ax.set_title("warm reads, 3 workers, one SIGSTOPped vs none")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=240)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument(
        "--deadline", type=float, default=10.0, help="read deadline of the no-hedging rows, s"
    )
    parser.add_argument("--json", type=Path, default=RESULTS / "hedge_bench.json")
    parser.add_argument("--png", type=Path, default=RESULTS / "hedge_bench.png")
    args = parser.parse_args()
    cluster = LocalCluster.up(
        Path(tempfile.mkdtemp(prefix="hedge-bench-")), workers=3, lease_ttl=120
    )
    rows: list[Row] = []
    try:
        files = dataset(cluster, args.files)
        with Client(config=cluster.client_config()) as c:
            c.mount("/h", f"s3://{BUCKET}/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
        for route in ("data port", "gRPC"):
            for frozen, hedging in ((False, True), (True, True), (True, False)):
                row = one_row(cluster, files, args, route=route, frozen=frozen, hedging=hedging)
                print(f"{label(row)}: done", file=sys.stderr)
                rows.append(row)
    finally:
        cluster.down()
    print(table(rows))
    out = {
        "rows": [asdict(r) for r in rows],
        "settings": {k: str(v) for k, v in vars(args).items()},
        "cpus": os.cpu_count(),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2) + "\n")
    plot(rows, args.png)


if __name__ == "__main__":
    main()
