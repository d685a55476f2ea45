"""The main job: a sample data set in the local cluster's S3, mounted and read twice.

The second pass is served from the workers' cache: hit ratio ~1, zero S3 GETs.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from reservoir.client import Client

from .cluster import LocalCluster

BUCKET = "reservoir-demo"
MOUNT = "/datasets/demo"


def sample_sizes(files: int, seed: int = 7) -> list[int]:
    """Mostly small files (images, records), some medium, a few multi-block ones."""
    rng = random.Random(seed)
    sizes = []
    for i in range(files):
        roll = rng.random()
        if i == 0:
            sizes.append(0)
        elif roll < 0.80:
            sizes.append(rng.randint(1, 64 * 1024))
        elif roll < 0.97:
            sizes.append(rng.randint(64 * 1024, 2 * 1024 * 1024))
        else:
            sizes.append(rng.randint(4 * 1024 * 1024, 12 * 1024 * 1024))
    return sizes


def write_dataset(cluster: LocalCluster, files: int) -> dict[str, int]:
    s3 = cluster.s3_client()
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=BUCKET)
    rng = random.Random(11)
    layout = {}
    for i, size in enumerate(sample_sizes(files)):
        layout[f"train/shard-{i % 8}/sample-{i:05d}.bin"] = size

    def put(item: tuple[str, int]) -> None:
        key, size = item
        s3.put_object(Bucket=BUCKET, Key=f"demo/{key}", Body=rng.randbytes(size))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, layout.items()))
    return layout


def _totals(rs: Client, cluster: LocalCluster) -> dict[str, int]:
    stats = rs.worker_stats()
    totals = {
        "hits": sum(s.hits for s in stats),
        "misses": sum(s.misses for s in stats),
        "worker_ufs_gets": sum(s.ufs_gets for s in stats),
    }
    if cluster.s3_managed:
        totals["s3_gets"] = cluster.s3_counts().get("GET", 0)
    return totals


def run_demo(state_dir: Path, files: int = 400, json_output: bool = False) -> list[dict[str, Any]]:
    cluster = LocalCluster.load(state_dir)
    # Progress, not data: stderr, so `local demo --json` prints nothing but its JSON.
    print(
        f"writing {files} files to s3://{BUCKET}/demo/ at {cluster.s3_endpoint} ...",
        file=sys.stderr,
        flush=True,
    )
    layout = write_dataset(cluster, files)
    passes = []
    with Client(config=cluster.client_config()) as rs:  # a --secure cluster's CA and token
        if MOUNT not in {m.path for m in rs.mounts()}:
            rs.mount(
                MOUNT, f"s3://{BUCKET}/demo/", endpoint_url=cluster.s3_endpoint, credentials="env"
            )
        paths = [f"{MOUNT}/{key}" for key in layout]
        for number in (1, 2):
            before = _totals(rs, cluster)
            start = time.perf_counter()
            # List each shard once (one master call per directory fills the client's
            # metadata cache), then read the files in batches.
            for shard in sorted({p.rsplit("/", 1)[0] for p in paths}):
                rs.ls(shard)
            data = rs.read_many(paths)
            seconds = time.perf_counter() - start
            after = _totals(rs, cluster)
            nbytes = sum(len(d) for d in data)
            if nbytes != sum(layout.values()):
                raise SystemExit(
                    f"pass {number}: read {nbytes} bytes, expected {sum(layout.values())}"
                )
            hits = after["hits"] - before["hits"]
            misses = after["misses"] - before["misses"]
            gets = after.get("s3_gets", after["worker_ufs_gets"]) - before.get(
                "s3_gets", before["worker_ufs_gets"]
            )
            passes.append(
                {
                    "pass": number,
                    "files": len(data),
                    "bytes": nbytes,
                    "seconds": round(seconds, 3),
                    "hit_ratio": round(hits / (hits + misses), 4) if hits + misses else 1.0,
                    "s3_gets": gets,
                }
            )
    if json_output:
        print(json.dumps(passes, indent=2))
    else:
        print(
            f"{'pass':>4} {'files':>6} {'bytes':>12} {'seconds':>8} {'MB/s':>8} {'hit ratio':>9} {'S3 GETs':>8}"
        )
        for p in passes:
            rate = p["bytes"] / p["seconds"] / 1e6 if p["seconds"] else 0.0
            print(
                f"{p['pass']:>4} {p['files']:>6} {p['bytes']:>12} {p['seconds']:>8.2f} {rate:>8.1f}"
                f" {p['hit_ratio']:>9.3f} {p['s3_gets']:>8}"
            )
    return passes
