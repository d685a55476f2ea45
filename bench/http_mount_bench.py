"""Reading an http:// mount (issue #35): a cold read through the cluster (the workers'
ranged GETs at the file server) and a warm one (from the cache), beside fsspec's HTTP
filesystem reading the same files straight from the same server, in one run.

The server is aiohttp's static files in a process of its own (tests/http_files.py), on
loopback, so the numbers are the software's cost, not a network's. Reads are one at a
time (one thread), small files and large ones, each file read whole.

    python bench/http_mount_bench.py                      # 300 x 32 KiB, 2 x 32 MiB
    python bench/http_mount_bench.py --small 100 --large 1

Writes a table to stdout, bench/results/http_mount_bench.json and http_mount_bench.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the test suite's file server

RESULTS = Path(__file__).parent / "results"


def _timed(read: Callable[[str], bytes], names: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    size = sum(len(read(name)) for name in names)
    return time.perf_counter() - started, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=300, help="32 KiB files")
    parser.add_argument("--large", type=int, default=2, help="32 MiB files")
    args = parser.parse_args()

    import fsspec

    from reservoir.client import Client
    from reservoir.local.cluster import LocalCluster
    from tests.http_files import HttpFiles

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="http-bench-") as tmp:
        served = Path(tmp) / "served"
        sets = {
            "small": [(f"s{i:05d}.bin", 32 << 10) for i in range(args.small)],
            "large": [(f"l{i:03d}.bin", 32 << 20) for i in range(args.large)],
        }
        server = HttpFiles(served.parent)  # serves `served` under /files/served/
        cluster = LocalCluster.up(
            Path(tmp) / "cluster", workers=2, env={"RESERVOIR_ALLOWED_SCHEMES": "s3,http"}
        )
        try:
            with Client(cluster.master_address) as client:
                fs = fsspec.filesystem("http")
                for kind, files in sets.items():
                    for variant in ("fsspec-http", "reservoir-cold", "reservoir-warm"):
                        # Fresh files for each cold variant: nothing cached anywhere.
                        folder = served / f"{kind}-{variant.split('-')[0]}"
                        if not folder.exists():
                            folder.mkdir(parents=True)
                            for name, size in files:
                                (folder / name).write_bytes(os.urandom(size))
                        names = [name for name, _ in files]
                        url = f"{server.url}served/{folder.name}/"
                        before = sum(server.gets(f"served/{folder.name}/{n}") for n in names)
                        if variant == "fsspec-http":
                            wall, size = _timed(lambda n, u=url: fs.cat_file(u + n), names)
                        else:
                            root = f"/bench/{kind}"
                            if variant == "reservoir-cold":
                                client.mount(root, url, credentials="anonymous")
                            wall, size = _timed(lambda n, r=root: client.read(f"{r}/{n}"), names)
                        gets = sum(server.gets(f"served/{folder.name}/{n}") for n in names)
                        rows.append(
                            {
                                "files": kind,
                                "variant": variant,
                                "count": len(names),
                                "bytes": size,
                                "wall_s": round(wall, 4),
                                "MBps": round(size / wall / 1e6, 1),
                                "files_per_s": round(len(names) / wall, 1),
                                "server_gets": gets - before,
                            }
                        )
        finally:
            cluster.down()
            server.stop()

    print(f"{'files':6} {'variant':15} {'count':>5} {'MB/s':>8} {'files/s':>8} {'GETs':>6}")
    for r in rows:
        print(
            f"{r['files']:6} {r['variant']:15} {r['count']:5d} {r['MBps']:8.1f} "
            f"{r['files_per_s']:8.1f} {r['server_gets']:6d}"
        )
    RESULTS.mkdir(exist_ok=True)
    out = {"args": vars(args), "rows": rows, "cpus": os.cpu_count()}
    (RESULTS / "http_mount_bench.json").write_text(json.dumps(out, indent=2) + "\n")
    _plot(rows)


def _plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, kind, metric in zip(axes, ("small", "large"), ("files_per_s", "MBps"), strict=True):
        mine = [r for r in rows if r["files"] == kind]
        ax.bar([r["variant"] for r in mine], [r[metric] for r in mine])
        ax.set_title(f"{kind} files, {'files/s' if metric == 'files_per_s' else 'MB/s'}")
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "http_mount_bench.png", dpi=100)


if __name__ == "__main__":
    main()
