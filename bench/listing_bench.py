"""A directory of --entries files listed through the master's pages: time to the first
entry and to the last, and what the client and the master hold meanwhile.

    python bench/listing_bench.py                  # 100,000 entries, 3 runs per row (~2 min)
    python bench/listing_bench.py --entries 10000 --runs 1 --quick-json

Starts a local cluster (etcd, S3, the master, one worker), mounts an empty bucket and
writes the directory's inodes straight into etcd in the master's layout (NamespaceStore's
chunks), its listing marked fresh, so the master answers from etcd alone, as it
does for any directory listed within its sync interval. Rows:

  sdk iter_ls      Client.iter_ls at --page-size entries per call: first entry, last entry
  sdk ls           Client.ls: every page collected into one list
  cli ls           `reservoir ls DIR` in a subprocess, stdout to a pipe: first line, last
  cli ls -l        the same as a table

For the SDK rows it also reports the client's peak of Python-allocated memory during a
listing (tracemalloc, in a pass of its own), and for every row the master's peak RSS
(VmHWM) after it.
Prints a table of medians and writes --json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reservoir.client import Client
from reservoir.common.metadata.metadata_store import open_metadata_store
from reservoir.common.models import Inode, file_id_for
from reservoir.local.cluster import LocalCluster
from reservoir.master.mount_policy import MountPolicy
from reservoir.master.mount_table import MountTable
from reservoir.master.namespace_store import NamespaceStore

HERE = Path(__file__).resolve().parent
MOUNT = "/big"
DIRECTORY = f"{MOUNT}/d"


async def _write_directory(metadata_url: str, entries: int) -> None:
    store = open_metadata_store(metadata_url, timeout_s=30)
    now = int(time.time() * 1000)
    try:
        mounts = MountTable(store, MountPolicy("s3"), 4 * 1024 * 1024)
        await mounts.load()
        namespace = NamespaceStore(store, mounts)
        marker = Inode(path=DIRECTORY, is_dir=True, mount_path=MOUNT, synced_ms=now, listed_ms=now)
        await namespace.put_many([marker])
        batch: list[Inode] = []
        for i in range(entries):
            path = f"{DIRECTORY}/part-{i:07d}.bin"
            uri = f"s3://listing/d/part-{i:07d}.bin"
            etag, size = f"{i:032x}", 4096 + i % 1000
            batch.append(
                Inode(
                    path=path,
                    is_dir=False,
                    size=size,
                    mtime_ms=now - now % 1000,
                    etag=etag,
                    block_size=4 * 1024 * 1024,
                    file_id=file_id_for(uri, etag, size, 4 * 1024 * 1024),
                    ufs_uri=uri,
                    mount_path=MOUNT,
                    synced_ms=now,
                )
            )
            if len(batch) == 10_000:
                await namespace.put_many(batch)
                batch = []
        await namespace.put_many(batch)
    finally:
        await store.close()


def _master_peak_rss_mb(cluster: LocalCluster) -> float:
    status = Path(f"/proc/{cluster.processes['master'].pid}/status").read_text()
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _timed_sdk(listing: Callable[[], Any]) -> dict[str, float]:
    started = time.perf_counter()
    first, count = 0.0, 0
    for _ in listing():
        count += 1
        if count == 1:
            first = time.perf_counter() - started
    total = time.perf_counter() - started
    return {"first_s": first, "total_s": total, "entries": count}


def _client_peak_mb(listing: Callable[[], Any]) -> float:
    """The most Python memory the client held during a listing (a pass of its own:
    tracemalloc slows every allocation, so timed passes run without it)."""
    tracemalloc.start()
    for _ in listing():
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def _timed_cli(cluster: LocalCluster, *args: str) -> dict[str, float]:
    command = [sys.executable, "-m", "reservoir.cli.main", "--master", cluster.master_address]
    started = time.perf_counter()
    with subprocess.Popen([*command, *args], stdout=subprocess.PIPE, text=True) as cli:
        assert cli.stdout is not None
        first, count = 0.0, 0
        for _ in cli.stdout:
            count += 1
            if count == 1:
                first = time.perf_counter() - started
    if cli.returncode != 0:
        raise SystemExit(f"reservoir {' '.join(args)} failed ({cli.returncode})")
    total = time.perf_counter() - started
    return {"first_s": first, "total_s": total, "entries": count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--page-size", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default=str(HERE / "results" / "listing_bench.json"))
    parser.add_argument("--quick-json", action="store_true", help="do not write --json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="listing-bench-") as tmp:
        cluster = LocalCluster.up(
            Path(tmp) / "cluster",
            workers=1,
            env={"RESERVOIR_LIST_PAGE_SIZE": str(args.page_size)},
        )
        try:
            s3 = cluster.s3_client()
            s3.create_bucket(Bucket="listing")
            with Client(cluster.master_address) as rs:
                rs.mount(
                    MOUNT,
                    "s3://listing/",
                    endpoint_url=cluster.s3_endpoint,
                    metadata_sync="interval:1h",
                )
            started = time.perf_counter()
            asyncio.run(_write_directory(cluster.metadata_url, args.entries))
            print(
                f"wrote {args.entries} inodes into etcd in {time.perf_counter() - started:.1f} s",
                file=sys.stderr,
            )
            rss_before = _master_peak_rss_mb(cluster)
            config = cluster.client_config(list_page_size=args.page_size)
            rows: dict[str, list[dict[str, float]]] = {}
            os.environ["RESERVOIR_LIST_PAGE_SIZE"] = str(args.page_size)  # the CLI rows'
            sdk: dict[str, Callable[[Client], Any]] = {
                f"sdk iter_ls (page {args.page_size})": lambda rs: rs.iter_ls(DIRECTORY),
                "sdk ls (all pages, one list)": lambda rs: rs.ls(DIRECTORY),
            }
            for run in range(args.runs):
                measured = {}
                for name, listing in sdk.items():
                    # A fresh client each time: nothing remembered from the pass before.
                    with Client(config=config) as rs:
                        measured[name] = _timed_sdk(lambda rs=rs, f=listing: f(rs))
                measured["cli ls"] = _timed_cli(cluster, "ls", DIRECTORY)
                measured["cli ls -l"] = _timed_cli(cluster, "ls", "-l", DIRECTORY)
                for name, numbers in measured.items():
                    numbers["master_peak_rss_mb"] = _master_peak_rss_mb(cluster)
                    rows.setdefault(name, []).append(numbers)
                print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
            peaks: dict[str, float] = {}
            for name, listing in sdk.items():
                with Client(config=config) as rs:
                    peaks[name] = _client_peak_mb(lambda rs=rs, f=listing: f(rs))
        finally:
            cluster.down()

    print(
        f"\n{args.entries} entries in one directory, pages of {args.page_size}; "
        f"medians of {args.runs} runs; master peak RSS before listing {rss_before:.0f} MiB\n"
    )
    header = f"{'listing':32} {'first entry':>12} {'all':>9} {'entries/s':>10} "
    header += f"{'client peak':>12} {'master peak RSS':>16}"
    print(header)
    for name, runs in rows.items():
        first = statistics.median(r["first_s"] for r in runs)
        total = statistics.median(r["total_s"] for r in runs)
        entries = runs[0]["entries"]
        rss = max(r["master_peak_rss_mb"] for r in runs)
        peak_text = f"{peaks[name]:.1f} MiB" if name in peaks else "-"
        print(
            f"{name:32} {first * 1000:>9.1f} ms {total:>7.2f} s {entries / total:>10.0f} "
            f"{peak_text:>12} {rss:>12.0f} MiB"
        )
    if not args.quick_json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "entries": args.entries,
                    "page_size": args.page_size,
                    "master_peak_rss_before_mb": rss_before,
                    "rows": rows,
                    "client_peak_mb": peaks,
                },
                indent=2,
            )
        )
        print(f"\nraw numbers: {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
