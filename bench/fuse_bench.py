"""`cat` through the FUSE mount against the SDK's `Client.read`: warm reads of small and
large files, side by side in one run.

    python bench/fuse_bench.py            # ~3 min: 1000 x 8-40 KB + 4 x 64 MiB, 3 rounds
    python bench/fuse_bench.py --quick    # ~1 min: 300 small, 2 x 32 MiB, 1 round

Starts a local cluster (2 workers; `--shm` puts their blocks in /dev/shm, where the SDK and
the mount's serving process then read them directly), uploads the data sets, loads them
into the cache (a load job), mounts the namespace with `reservoir fuse -d` and reads one
of them once through the SDK and the mount untimed. Then, round after round, every row
reads its whole data set once, the rows' order rotating from round to round:

  sdk read, 1 thread / N threads        `Client.read(path)` per file
  fuse cat, 1 process                   one `cat` of every file > /dev/null
  fuse cat, N processes                 `xargs -P N cat`: N `cat`s at once
  fuse open().read(), N threads         Python's `open(path, 'rb').read()` per file
  fuse cat, page cache                  the `cat` again: the kernel's cached pages

Before every FUSE row but the last, the files' pages are dropped from the kernel's page
cache (`posix_fadvise(DONTNEED)` on each file, untimed), so each of those reads goes
through FUSE requests to the serving process. Every row's byte count is checked. Prints a
table (medians of the rounds, min-max MB/s), writes JSON and a PNG to bench/results/.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reservoir.client import Client
from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed.results import MiB, log, machine_info  # noqa: E402 - bench/ is not a package

BUCKET = "fuse-bench"
RESULTS = Path(__file__).parent / "results"


def _upload(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, list[str]]:
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=BUCKET)
    rnd = random.Random(7)
    small = [f"small/f{i:05d}.bin" for i in range(args.small_files)]
    for key in small:
        s3.put_object(Bucket=BUCKET, Key=key, Body=rnd.randbytes(rnd.randint(8_000, 40_000)))
    blob = os.urandom(args.large_file_mb * MiB)
    large = [f"large/f{i}.bin" for i in range(args.large_files)]
    for i, key in enumerate(large):
        s3.put_object(Bucket=BUCKET, Key=key, Body=blob[i:] + blob[:i])
    return {"small": small, "large": large}


def _drop_page_cache(files: list[Path]) -> None:
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _threads(read: Callable[[Any], int], items: list[Any], threads: int) -> int:
    if threads == 1:
        return sum(read(item) for item in items)
    with cf.ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(read, items))


def _cat(files: list[Path], processes: int) -> None:
    """`cat` of every file to /dev/null, by `processes` `cat`s at once."""
    groups = [files[i::processes] for i in range(processes)]
    running = [
        subprocess.Popen(["cat", *map(str, group)], stdout=subprocess.DEVNULL)
        for group in groups
        if group
    ]
    for p in running:
        if p.wait() != 0:
            raise RuntimeError(f"cat exited {p.returncode}")


class Rows:
    """The rows of one data set: name -> a function that reads it all once, returning bytes."""

    def __init__(self, client: Client, root: Path, names: list[str], threads: int) -> None:
        self.paths = [f"/fb/{n}" for n in names]
        self.files = [root / n for n in names]
        self.threads = min(threads, len(names))
        # `cat`'s output is not counted (it goes to /dev/null): its rows count the files'
        # sizes, and a `cat` that fails to read fails the run.
        self.size = sum(len(client.read(p)) for p in self.paths)
        n = self.threads
        self.reads: dict[str, Callable[[], int]] = {
            "sdk read, 1 thread": lambda: _threads(lambda p: len(client.read(p)), self.paths, 1),
            f"sdk read, {n} threads": lambda: _threads(
                lambda p: len(client.read(p)), self.paths, n
            ),
            "fuse cat, 1 process": lambda: self._cat(1),
            f"fuse cat, {n} processes": lambda: self._cat(n),
            f"fuse open().read(), {n} threads": lambda: _threads(
                lambda f: len(f.read_bytes()), self.files, n
            ),
            "fuse cat, page cache": lambda: self._cat(1),
        }

    def _cat(self, processes: int) -> int:
        _cat(self.files, processes)
        return self.size

    def measure(self, name: str) -> tuple[float, int]:
        if name.startswith("fuse") and "page cache" not in name:
            _drop_page_cache(self.files)
        elif "page cache" in name:
            _cat(self.files, 1)  # the pages in, whatever ran before
        started = time.perf_counter()
        nbytes = self.reads[name]()
        return time.perf_counter() - started, nbytes


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    os.environ.update(DEV_CREDENTIALS)
    cluster = LocalCluster.up(
        tmp / "cluster", workers=2, capacity=args.capacity, shm=args.shm, lease_ttl=3
    )
    root = tmp / "mnt"
    root.mkdir()
    env = {**os.environ, "RESERVOIR_FUSE_RUN_DIR": str(tmp / "run")}
    cli = [sys.executable, "-m", "reservoir.cli.main", "--master", cluster.master_address, "fuse"]
    results: dict[str, Any] = {"rows": {}, "upload_s": 0.0}
    try:
        started = time.perf_counter()
        names = _upload(cluster, args)
        results["upload_s"] = time.perf_counter() - started
        sizes: dict[str, int] = {}
        with Client(cluster.master_address) as client:
            client.mount("/fb", f"s3://{BUCKET}/", endpoint_url=cluster.s3_endpoint)
            job = client.watch_job(client.submit_load("/fb").id)
            assert job.state == "completed", job.errors
            subprocess.run([*cli, "-d", str(root), "--path", "/fb"], env=env, check=True)
            sets = {
                dataset: Rows(client, root, keys, args.threads) for dataset, keys in names.items()
            }
            for dataset, rows in sets.items():
                sizes[dataset] = rows.size
                _cat(rows.files, 1)  # the serving process's client warms too
            runs: dict[tuple[str, str], list[tuple[float, int]]] = {}
            for round_ in range(args.rounds):
                for dataset, rows in sets.items():
                    order = list(rows.reads)
                    shift = round_ % len(order)
                    for name in order[shift:] + order[:shift]:
                        seconds, nbytes = rows.measure(name)
                        if nbytes != sizes[dataset]:
                            raise AssertionError(f"{dataset} {name}: {nbytes} != {sizes[dataset]}")
                        runs.setdefault((dataset, name), []).append((seconds, nbytes))
                log(f"round {round_ + 1}/{args.rounds} done")
        for (dataset, name), mine in runs.items():
            count = len(sets[dataset].files)
            mb_s = [n / MiB / s for s, n in mine]
            results["rows"].setdefault(dataset, []).append(
                {
                    "row": name,
                    "mb_s": statistics.median(mb_s),
                    "min_mb_s": min(mb_s),
                    "max_mb_s": max(mb_s),
                    "files_s": statistics.median(count / s for s, _ in mine),
                    "files": count,
                    "bytes": sizes[dataset],
                    "runs": [{"seconds": s, "bytes": n} for s, n in mine],
                }
            )
    finally:
        subprocess.run([*cli, "--unmount", str(root)], env=env, check=False)
        cluster.down()
    return results


def plot(results: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(results["rows"])
    fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 4.2))
    for ax, dataset in zip(axes if len(datasets) > 1 else [axes], datasets, strict=True):
        rows = results["rows"][dataset]
        unit = "files_s" if dataset == "small" else "mb_s"
        values = [r[unit] for r in rows]
        colors = ["#4c72b0" if r["row"].startswith("sdk") else "#dd8452" for r in rows]
        ax.barh([r["row"] for r in rows], values, color=colors)
        if unit == "mb_s":
            errors = [
                [r["mb_s"] - r["min_mb_s"] for r in rows],
                [r["max_mb_s"] - r["mb_s"] for r in rows],
            ]
            ax.errorbar(values, range(len(rows)), xerr=errors, fmt="none", ecolor="black")
        base = values[0]  # sdk read, 1 thread
        for y, (r, v) in enumerate(zip(rows, values, strict=True)):
            at = r["max_mb_s"] if unit == "mb_s" else v
            ax.text(at, y, f" {v:.0f} ({v / base:.2f}x)", va="center", fontsize=8)
        ax.set_xlim(right=1.25 * max(r["max_mb_s"] if unit == "mb_s" else r[unit] for r in rows))
        ax.invert_yaxis()
        ax.set_xlabel("files/s (median)" if unit == "files_s" else "MiB/s (median; bars min-max)")
        ax.set_title(dataset, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small-files", type=int, default=1000, help="files of 8-40 KB")
    p.add_argument("--large-files", type=int, default=4)
    p.add_argument("--large-file-mb", type=int, default=64)
    p.add_argument("--threads", type=int, default=16, help="N: threads and cat processes")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--capacity", default="2GiB", help="cache capacity per worker")
    p.add_argument("--shm", action="store_true", help="workers' blocks in /dev/shm")
    p.add_argument("--quick", action="store_true", help="300 small, 2 x 32 MiB, 1 round")
    p.add_argument("--json", type=Path, default=RESULTS / "fuse_bench.json")
    p.add_argument("--png", type=Path, default=RESULTS / "fuse_bench.png")
    args = p.parse_args(argv)
    if args.quick:
        args.small_files, args.large_files, args.large_file_mb, args.rounds = 300, 2, 32, 1
    started = time.perf_counter()
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="fuse-bench-") as tmp:
        results = measure(args, Path(tmp))
    path = "short-circuit (--shm)" if args.shm else "gRPC"
    title = (
        f"Warm reads, FUSE vs SDK ({path}): {args.small_files} small files, "
        f"{args.large_files} x {args.large_file_mb} MiB, {args.rounds} rounds"
    )
    print(title)
    print(f"{'dataset':<7} {'row':<32} {'MB/s':>8} {'(min-max)':>15} {'files/s':>9} {'x sdk 1':>8}")
    for dataset, rows in results["rows"].items():
        for r in rows:
            spread = f"({r['min_mb_s']:.0f}-{r['max_mb_s']:.0f})"
            ratio = r["mb_s"] / rows[0]["mb_s"]
            print(
                f"{dataset:<7} {r['row']:<32} {r['mb_s']:>8.1f} {spread:>15} {r['files_s']:>9.0f}"
                f" {ratio:>8.2f}"
            )
    machine["loadavg_end"] = os.getloadavg()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                **results,
                "args": {k: str(v) for k, v in vars(args).items()},
                "machine": machine,
                "seconds": time.perf_counter() - started,
            },
            indent=2,
        )
    )
    plot(results, args.png, title)
    print(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
