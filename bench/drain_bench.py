"""Draining a worker: how fast its blocks move, and what reads feel meanwhile.

    python bench/drain_bench.py                          # 3 workers, 512 MiB cached
    python bench/drain_bench.py --mb 256 --rate 64MiB    # a smaller set, a tighter rate
    python bench/drain_bench.py --json results/drain_bench.json --png results/drain_bench.png

One local cluster (etcd, the S3 server, a master, 3 workers keeping blocks in /dev/shm),
the master's move rate set to --rate (RESERVOIR_MOVE_RATE). A data set of --mb MiB in
files of 8 MiB is loaded, then:

  baseline   --threads reader threads read whole files in a loop for --seconds; each
             read's latency is kept
  drain      the same readers while `drain worker2 --wait` runs: its time, its bytes and
             their rate against the limit (a drain with no fixed waits takes bytes / rate),
             the readers' latencies, failures and wrong bytes (both must be 0)
  ceiling    one client reading the drained worker's share from the cache (what the
             machine moves through a worker, the most a copy could go)
  after      the data set read again: S3 GETs at the server (target 0)

Prints a table, writes --json and a --png of the latencies and rates.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from reservoir.client import Client
from reservoir.common.config import parse_size
from reservoir.local.cluster import LocalCluster

MiB = 1 << 20
FILE = 8 * MiB
BLOCK = 4 * MiB


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class Readers:
    def __init__(self, address: str, files: dict[str, bytes], threads: int) -> None:
        self.files = files
        self.latencies: list[float] = []
        self.failures = 0
        self.wrong = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._client = Client(address)
        self._threads = [threading.Thread(target=self._loop, args=(n,)) for n in range(threads)]

    def _loop(self, seed: int) -> None:
        rng = random.Random(seed)
        paths = list(self.files)
        while not self._stop.is_set():
            path = rng.choice(paths)
            start = time.perf_counter()
            try:
                with self._client.open(path) as f:
                    ok = f.read() == self.files[path]
            except Exception:
                with self._lock:
                    self.failures += 1
                continue
            took = time.perf_counter() - start
            with self._lock:
                self.latencies.append(took)
                self.wrong += not ok

    def __enter__(self) -> Readers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        self._client.close()

    def summary(self) -> dict[str, Any]:
        ms = [x * 1000 for x in self.latencies]
        return {
            "reads": len(ms),
            "p50_ms": round(_percentile(ms, 0.5), 2),
            "p99_ms": round(_percentile(ms, 0.99), 2),
            "max_ms": round(max(ms, default=0.0), 2),
            "failures": self.failures,
            "wrong_bytes": self.wrong,
        }


def run(args: argparse.Namespace, state_dir: Path) -> dict[str, Any]:
    rate = parse_size(args.rate)
    cluster = LocalCluster.up(
        state_dir, workers=3, shm=True, capacity="2GiB", env={"RESERVOIR_MOVE_RATE": str(rate)}
    )
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="drain")
        files = {}
        for i in range(max(1, args.mb * MiB // FILE)):
            data = os.urandom(FILE)
            s3.put_object(Bucket="drain", Key=f"d/f{i:03d}", Body=data)
            files[f"/drain/f{i:03d}"] = data
        with Client(cluster.master_address) as c:
            c.mount("/drain", "s3://drain/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
            assert c.watch_job(c.submit_load("/drain").id).succeeded
            held = {s.worker_id: s for s in c.worker_stats()}
            share = held["worker2"].used_bytes

            with Readers(cluster.master_address, files, args.threads) as base:
                time.sleep(args.seconds)
            with Readers(cluster.master_address, files, args.threads) as during:
                start = time.perf_counter()
                job = c.drain("worker2", wait=True)
                drain_s = time.perf_counter() - start

            # The ceiling: the drained worker's share read by one client from the cache.
            with Client(cluster.master_address) as reader:
                start = time.perf_counter()
                got = 0
                for path in list(files)[: max(1, share // FILE)]:
                    with reader.open(path) as f:
                        got += len(f.read())
                ceiling = got / (time.perf_counter() - start)

            gets = cluster.s3_counts().get("GET", 0)
            cluster.stop("worker2")
            with Client(cluster.master_address) as fresh:
                for path, data in files.items():
                    with fresh.open(path) as f:
                        assert f.read() == data, path
            after_gets = cluster.s3_counts().get("GET", 0) - gets
        return {
            "data_mb": len(files) * FILE // MiB,
            "drained_worker_mb": round(share / MiB, 1),
            "drain": {
                "state": job.state.value,
                "blocks": job.done_blocks,
                "mb": round(job.done_bytes / MiB, 1),
                "seconds": round(drain_s, 2),
                "mb_s": round(job.done_bytes / MiB / drain_s, 1),
                "rate_limit_mb_s": round(rate / MiB, 1) if rate > 0 else None,
                "expected_seconds": round(job.done_bytes / rate, 2) if rate > 0 else None,
            },
            "ceiling_cached_read_mb_s": round(ceiling / MiB, 1),
            "reads_baseline": base.summary(),
            "reads_during_drain": during.summary(),
            "s3_gets_after_drain": after_gets,
        }
    finally:
        cluster.down()


def table(result: dict[str, Any]) -> str:
    d, b, r = result["drain"], result["reads_baseline"], result["reads_during_drain"]
    lines = [
        f"data set {result['data_mb']} MiB; worker2 held {result['drained_worker_mb']} MiB",
        f"drain: {d['state']}, {d['mb']} MiB in {d['seconds']} s = {d['mb_s']} MiB/s "
        f"(limit {d['rate_limit_mb_s']} MiB/s, bytes/limit = {d['expected_seconds']} s; "
        f"cached-read ceiling {result['ceiling_cached_read_mb_s']} MiB/s)",
        f"{'reads':<14}{'count':>8}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}{'failed':>8}"
        f"{'wrong':>7}",
    ]
    for name, s in (("baseline", b), ("during drain", r)):
        lines.append(
            f"{name:<14}{s['reads']:>8}{s['p50_ms']:>10}{s['p99_ms']:>10}{s['max_ms']:>10}"
            f"{s['failures']:>8}{s['wrong_bytes']:>7}"
        )
    lines.append(f"S3 GETs reading the whole set after the drain: {result['s3_gets_after_drain']}")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    b, r = result["reads_baseline"], result["reads_during_drain"]
    names = ["p50", "p99", "max"]
    x = range(len(names))
    left.bar([i - 0.2 for i in x], [b["p50_ms"], b["p99_ms"], b["max_ms"]], 0.4, label="baseline")
    left.bar(
        [i + 0.2 for i in x], [r["p50_ms"], r["p99_ms"], r["max_ms"]], 0.4, label="during drain"
    )
    left.set_xticks(list(x), names)
    left.set_ylabel("read of an 8 MiB file (ms)")
    left.legend()
    d = result["drain"]
    bars = {"drain": d["mb_s"], "limit": d["rate_limit_mb_s"] or 0.0}
    bars["cached read"] = result["ceiling_cached_read_mb_s"]
    right.bar(list(bars), list(bars.values()), color=["#1565c0", "#9e9e9e", "#2e7d32"])
    right.set_ylabel("MiB/s")
    fig.suptitle(
        f"Drain of a worker holding {result['drained_worker_mb']} MiB: "
        f"{d['seconds']} s, S3 GETs after: {result['s3_gets_after_drain']}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=512, help="data set size (MiB)")
    parser.add_argument("--rate", default="256MiB", help="the master's move rate (bytes/s)")
    parser.add_argument("--threads", type=int, default=4, help="reader threads")
    parser.add_argument("--seconds", type=float, default=5.0, help="baseline read time")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--png", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drain-bench-") as tmp:
        result = run(args, Path(tmp))
    result["median_note"] = "one run; the machine is noisy: repeat for medians"
    print(table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    if args.png:
        plot(result, args.png)


if __name__ == "__main__":
    main()
