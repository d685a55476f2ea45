"""Where a read's CPU goes on this machine: the CPU seconds of every process of a local
cluster (the workers, the master, the S3 server, the reading client) while it reads, for
the two issue #8 targets that the machine's two cores bound (see bench/README.md):

- cold large: `Client.read` of 8 x 32 MiB fresh files, 16 threads, right after the workers
  were restarted (read_bench's cold rows), against boto3 `get_object` of the same objects,
  straight and through one more TCP hop (`speed/relay_hop.py`: a splice relay, what a hop
  costs at the least), once passing the bytes on and once also keeping them in tmpfs as
  the workers do (the least a caching hop costs);
- warm small: `read_many` (4 threads x 64 paths) of 2,000 files of 8-40 KB from a client on
  no worker's host (data ports), and the same with 4 client processes.

CPU is utime + stime from /proc/<pid>/stat: it holds up better than wall time when the
machine is shared. One cluster on SeaweedFS (`--s3 moto` for the tests' server), 20 ms of
first-byte latency, medians of `--runs`.

    python bench/cpu_split_bench.py              # ~3 min
    python bench/cpu_split_bench.py --runs 5

Writes a table to stdout, bench/results/cpu_split_bench.json and cpu_split_bench.png.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from speed import readers  # noqa: E402
from speed.datasets import BUCKET, MOUNT, large_dataset, small_dataset, upload  # noqa: E402
from speed.relay_hop import RelayHop  # noqa: E402
from speed.s3_servers import S3Choice, cpu_seconds  # noqa: E402
from speed.session import Session  # noqa: E402
from speed.shm_flags import add_shm_arguments, shm_env  # noqa: E402

MiB = 1 << 20
SHM = "/dev/shm"


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


class Split:
    """One measured read: wall seconds, what was read, CPU seconds per process."""

    def __init__(self, seconds: float, nbytes: int, files: int, cpu: dict[str, float]) -> None:
        self.seconds, self.nbytes, self.files, self.cpu = seconds, nbytes, files, cpu

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "bytes": self.nbytes,
            "files": self.files,
            "cpu_s": self.cpu,
        }


def measure(read: Any, pids: dict[str, int], s3: S3Choice, cluster: Any) -> Split:
    before, s3_before, mine = _cpu(pids), s3.cpu_seconds(cluster), time.process_time()
    got = read()
    if got.wrong:
        raise RuntimeError(f"bytes differ: {got.wrong[:3]}")
    cpu = {n: v - before[n] for n, v in _cpu(pids).items()}
    cpu["s3 server"] = s3.cpu_seconds(cluster) - s3_before
    cpu["client"] = time.process_time() - mine
    return Split(got.seconds, got.nbytes, got.files, cpu)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--s3", choices=["seaweedfs", "moto"], default="seaweedfs")
    p.add_argument("--runs", type=int, default=3)
    add_shm_arguments(p)  # --shm-huge-pages mounts the caching hop's tmpfs the same way
    p.add_argument("--json", type=Path, default=HERE / "results" / "cpu_split_bench.json")
    p.add_argument("--png", type=Path, default=HERE / "results" / "cpu_split_bench.png")
    args = p.parse_args(argv)
    from reservoir.common.tmpfs_mount import HugeTmpfs
    from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

    for key, value in DEV_CREDENTIALS.items():
        os.environ.setdefault(key, value)
    work = Path(tempfile.mkdtemp(prefix="reservoir-cpu-split-"))
    s3 = S3Choice(args.s3, work)
    cluster = None
    hops: list[RelayHop] = []
    kept = Path(tempfile.mkdtemp(prefix="reservoir-hop-", dir=SHM if Path(SHM).is_dir() else None))
    # The least a caching hop costs is measured on the tmpfs the workers keep blocks on.
    kept_mount = HugeTmpfs(kept, 4 << 30) if args.shm_huge_pages == "mount" else None
    if kept_mount is not None:
        kept_mount.open()
    results: dict[str, list[Split]] = {}
    try:
        endpoint = s3.start()
        env = dict(DEV_CREDENTIALS) if endpoint else {}
        env.update(shm_env(args))
        cluster = LocalCluster.up(
            work / "cluster",
            workers=2,
            s3_endpoint=endpoint,
            capacity="4GiB",
            shm=True,
            env=env,
        )
        session = Session(cluster, s3)
        rng = random.Random(42)
        large, small = large_dataset(8, 32, rng), small_dataset(2000, rng)
        client_s3 = cluster.s3_client()
        client_s3.create_bucket(Bucket=BUCKET)
        cold = [f"cold{run}/{large.prefix}" for run in range(args.runs)]
        upload(client_s3, large, [large.prefix, *cold], 16, 42)
        upload(client_s3, small, [small.prefix], 16, 42)
        with session.client(short_circuit=False) as client:
            client.mount(
                MOUNT, f"s3://{BUCKET}/", credentials="env", endpoint_url=cluster.s3_endpoint
            )
        cluster.s3_config(latency_ms=20)
        boto = readers.boto3_client(cluster.s3_endpoint, 16)
        # The ceilings: boto3 through one more hop, passing the bytes on, then keeping them.
        hops += [
            RelayHop(cluster.s3_endpoint, work),
            RelayHop(cluster.s3_endpoint, work, kept),
        ]
        via = {
            "large: boto3 via a relay hop": hops[0],
            "large: boto3 via a relay hop that keeps": hops[1],
        }
        hopped = {row: readers.boto3_client(hop.start(), 16) for row, hop in via.items()}
        with cf.ThreadPoolExecutor(16) as pool:
            for run in range(args.runs):
                print(f"cold large, run {run + 1}/{args.runs}", file=sys.stderr)
                results.setdefault("large: boto3 direct", []).append(
                    measure(readers.boto3_reader(boto, large, pool), {}, s3, cluster)
                )
                for row, hop in via.items():
                    read = readers.boto3_reader(hopped[row], large, pool)
                    split = measure(read, {"relay hop": hop.pid}, s3, cluster)
                    results.setdefault(row, []).append(split)
                session.restart_workers()
                pids = {n: cluster.processes[n].pid for n in [*cluster.worker_names(), "master"]}
                fresh = large.at(cold[run])
                with session.client(short_circuit=False) as client:
                    results.setdefault("large: reservoir cold, read", []).append(
                        measure(readers.reservoir_read(client, fresh, pool), pids, s3, cluster)
                    )
        pids = {n: cluster.processes[n].pid for n in [*cluster.worker_names(), "master"]}
        with session.client(short_circuit=False) as client, cf.ThreadPoolExecutor(4) as pool:
            client.ls(f"{MOUNT}/{small.name}")
            many = readers.reservoir_read_many(client, small, pool, 64)
            many()  # warms the cache
            for run in range(args.runs):
                print(f"warm small read_many, run {run + 1}/{args.runs}", file=sys.stderr)
                results.setdefault("small: warm read_many, 1 process", []).append(
                    measure(many, pids, s3, cluster)
                )
        for run in range(args.runs):
            print(f"warm small read_many x 4 processes, run {run + 1}/{args.runs}", file=sys.stderr)
            four = readers.reservoir_processes(cluster.master_address, small, 4, 4, 64, False)
            split = measure(four, pids, s3, cluster)
            split.cpu.pop("client")  # this process only waited: the readers were children
            results.setdefault("small: warm read_many, 4 processes", []).append(split)
    finally:
        for relay in hops:
            relay.stop()
        if kept_mount is not None:
            kept_mount.close()
        shutil.rmtree(kept, ignore_errors=True)
        if cluster is not None:
            cluster.down()
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
    table = report(results)
    print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(args).items()},
                "nproc": os.cpu_count(),
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "runs": {k: [s.to_json() for s in v] for k, v in results.items()},
                "table": table,
            },
            indent=2,
        )
    )
    draw(results, args.png)
    return 0


def _median_cpu(splits: list[Split]) -> dict[str, float]:
    names = sorted({n for s in splits for n in s.cpu})
    return {n: statistics.median(s.cpu.get(n, 0.0) for s in splits) for n in names}


def _unit(row: str, splits: list[Split]) -> tuple[str, float]:
    """Per MiB for the large reads, per file for the small ones."""
    s = splits[0]
    return ("ms/MiB", s.nbytes / MiB) if row.startswith("large") else ("us/file", s.files / 1e3)


def report(results: dict[str, list[Split]]) -> str:
    lines = [
        f"{'row':<38} {'MB/s':>7} {'files/s':>8}  CPU per unit (median of runs), by process",
        "-" * 110,
    ]
    for row, splits in results.items():
        mb_s = statistics.median(s.nbytes / MiB / s.seconds for s in splits)
        files_s = statistics.median(s.files / s.seconds for s in splits)
        unit, units = _unit(row, splits)
        per = _median_cpu(splits)
        parts = ", ".join(f"{n} {1e3 * v / units:.2f}" for n, v in per.items())
        total = 1e3 * sum(per.values()) / units
        lines.append(f"{row:<38} {mb_s:>7.0f} {files_s:>8.0f}  {unit}: {parts}; total {total:.2f}")
    return "\n".join(lines)


def draw(results: dict[str, list[Split]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    large = [r for r in results if r.startswith("large")]
    small = [r for r in results if not r.startswith("large")]
    fig, axes = plt.subplots(1, 1 + len(small), figsize=(6.5 + 4.2 * len(small), 4.6))
    # The cold read beside its ceilings: each large row's CPU per MiB, stacked by process.
    ax = axes[0]
    bottoms = [0.0] * len(large)
    names = sorted({n for row in large for n in _median_cpu(results[row])})
    for colour, name in enumerate(names):
        heights = []
        for row in large:
            _, units = _unit(row, results[row])
            heights.append(1e3 * _median_cpu(results[row]).get(name, 0.0) / units)
        labels = [r.removeprefix("large: ") for r in large]
        ax.bar(labels, heights, bottom=bottoms, label=name, color=f"C{colour}")
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set_title("large: CPU per MiB by process, ceilings beside the cold read", fontsize=9)
    ax.set_ylabel("CPU ms/MiB")
    ax.tick_params(axis="x", labelrotation=20, labelsize=7)
    ax.legend(fontsize=7)
    for ax, row in zip(axes[1:], small, strict=True):
        unit, units = _unit(row, results[row])
        per = _median_cpu(results[row])
        ax.bar(list(per), [1e3 * per[n] / units for n in per], color="#1565c0")
        ax.set_title(row, fontsize=9)
        ax.set_ylabel(f"CPU {unit}")
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    fig.suptitle(f"CPU by process, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
