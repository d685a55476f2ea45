"""What a cold first epoch of small files costs the workers: their CPU seconds and the wall
time, with the workers' ranged GETs through obstore (this checkout) and through boto3 (the
code of an earlier commit), against boto3 reading S3 directly, in one run (issue #8).

Two local clusters share one S3 server and one bucket; the boto3 one runs its master and
workers on the sources of `--base` (extracted with `git archive`, put first on their
PYTHONPATH). Each round reads a fresh set of files (8-40 KB) once with 16 threads of
`Client.read`, in an order that rotates each round, so both clusters are cold and a noisy
machine slows all variants alike. Worker CPU is utime + stime from /proc/<pid>/stat.

    python bench/cold_fetch_bench.py --base f744f40     # 2 rounds x 2,000 files
    python bench/cold_fetch_bench.py --base f744f40 --files 500 --rounds 1

Writes a table to stdout, bench/results/cold_fetch_bench.json and cold_fetch_bench.png.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import random
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
BUCKET = "cold"
REPO = Path(__file__).resolve().parent.parent


def _ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)


def _worker_cpu_s(cluster: Any) -> float:
    hz = os.sysconf("SC_CLK_TCK")
    pids = [cluster.processes[name].pid for name in cluster.worker_names()]
    return sum(_ticks(pid) for pid in pids) / hz


def _base_sources(commit: str, into: Path) -> str:
    """The services of `commit`, as a PYTHONPATH that shadows this checkout's."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "services"], check=True, capture_output=True
    ).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    parts = ("common", "master", "worker")
    return os.pathsep.join(str(into / "services" / part) for part in parts)


def _fill(s3: Any, prefix: str, files: int) -> list[str]:
    rng = random.Random(prefix)
    keys = [f"{prefix}f{i:05d}.bin" for i in range(files)]

    def put(key: str) -> None:
        s3.put_object(Bucket=BUCKET, Key=key, Body=os.urandom(rng.randint(8_000, 40_000)))

    with cf.ThreadPoolExecutor(16) as pool:
        list(pool.map(put, keys))
    return keys


def _timed(read: Callable[[str], bytes], paths: list[str], threads: int) -> tuple[float, int]:
    start = time.perf_counter()
    with cf.ThreadPoolExecutor(threads) as pool:
        total = sum(len(b) for b in pool.map(read, paths))
    return time.perf_counter() - start, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="a commit whose workers use boto3")
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()

    from reservoir.client import Client
    from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

    tmp = Path(tempfile.mkdtemp(prefix="cold-fetch-bench-"))
    base_path = _base_sources(args.base, tmp / "base")
    clusters: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    try:
        clusters["workers: obstore"] = LocalCluster.up(tmp / "obstore")
        endpoint = clusters["workers: obstore"].s3_endpoint
        clusters["workers: boto3"] = LocalCluster.up(
            tmp / "boto3", s3_endpoint=endpoint, env={**DEV_CREDENTIALS, "PYTHONPATH": base_path}
        )
        s3 = clusters["workers: obstore"].s3_client()
        s3_pid, hz = clusters["workers: obstore"].processes["s3"].pid, os.sysconf("SC_CLK_TCK")
        s3.create_bucket(Bucket=BUCKET)
        clients = {name: Client(c.master_address) for name, c in clusters.items()}
        variants = [*clusters, "boto3 direct"]
        for r in range(args.rounds):
            prefix = f"r{r}/"
            keys = _fill(s3, prefix, args.files)
            for client in clients.values():
                client.mount(f"/r{r}", f"s3://{BUCKET}/{prefix}", endpoint_url=endpoint)
                client.ls(f"/r{r}")  # metadata in place: the reads below time the data path
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for name in order:
                cpu0 = time.process_time()
                s3_cpu0 = _ticks(s3_pid) / hz
                if name == "boto3 direct":
                    direct = clusters["workers: obstore"].s3_client()

                    def read(key: str, s3c: Any = direct) -> bytes:
                        return bytes(s3c.get_object(Bucket=BUCKET, Key=key)["Body"].read())

                    wall, total = _timed(read, keys, args.threads)
                    worker_cpu = None
                else:
                    client, cluster = clients[name], clusters[name]
                    before = _worker_cpu_s(cluster)
                    paths = [f"/r{r}/{k[len(prefix) :]}" for k in keys]
                    wall, total = _timed(client.read, paths, args.threads)
                    worker_cpu = _worker_cpu_s(cluster) - before
                rows.append(
                    {
                        "round": r,
                        "variant": name,
                        "files": len(keys),
                        "bytes": total,
                        "wall_s": round(wall, 3),
                        "worker_cpu_s": None if worker_cpu is None else round(worker_cpu, 3),
                        "reader_cpu_s": round(time.process_time() - cpu0, 3),
                        "s3_server_cpu_s": round(_ticks(s3_pid) / hz - s3_cpu0, 3),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
        for client in clients.values():
            client.close()
    finally:
        for cluster in clusters.values():
            cluster.down()
    _report(rows, args)


def _report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    names = list(dict.fromkeys(r["variant"] for r in rows))
    summary = []
    print(
        f"\n{'variant':<18} {'wall s':>8} {'files/s':>8} {'worker CPU s':>13} "
        f"{'ms/file':>8} {'S3 server CPU s':>16}"
    )
    for name in names:
        mine = [r for r in rows if r["variant"] == name]
        wall = sum(r["wall_s"] for r in mine)
        files = sum(r["files"] for r in mine)
        cpu = None if mine[0]["worker_cpu_s"] is None else sum(r["worker_cpu_s"] for r in mine)
        s3_cpu = sum(r["s3_server_cpu_s"] for r in mine)
        summary.append(
            {
                "variant": name,
                "wall_s": wall,
                "files": files,
                "worker_cpu_s": cpu,
                "s3_cpu_s": s3_cpu,
            }
        )
        per_file = "-" if cpu is None else f"{cpu / files * 1000:.2f}"
        print(
            f"{name:<18} {wall:>8.2f} {files / wall:>8.0f} "
            f"{'-' if cpu is None else f'{cpu:.2f}':>13} {per_file:>8} {s3_cpu:>16.2f}"
        )
    RESULTS.mkdir(exist_ok=True)
    out = {"args": vars(args), "rows": rows, "summary": summary, "cpus": os.cpu_count()}
    (RESULTS / "cold_fetch_bench.json").write_text(json.dumps(out, indent=2) + "\n")
    _plot(summary)


def _plot(summary: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    names = [s["variant"] for s in summary]
    left.bar(names, [s["files"] / s["wall_s"] for s in summary])
    left.set_title("cold small-file reads, files/s")
    cpu = [s for s in summary if s["worker_cpu_s"] is not None]
    right.bar([s["variant"] for s in cpu], [s["worker_cpu_s"] / s["files"] * 1000 for s in cpu])
    right.set_title("worker CPU ms per file")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "cold_fetch_bench.png", dpi=100)


if __name__ == "__main__":
    main()
