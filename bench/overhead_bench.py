"""What trust costs: warm read throughput with and without the client's checksum check, and
with and without TLS + tokens, measured side by side in one run.

Two local clusters hold the same data (one plain, one `secure`: TLS on every hop, tokens
with roles); both are warmed first. Then, round after round, every variant reads the
whole data set once, in an order that rotates each round, so a noisy machine slows all
variants alike; the table shows medians and ratios against the plain, checksum-on row.

    python bench/overhead_bench.py            # ~3 min: 4 x 64 MiB + 1000 x 20 KB, 5 rounds
    python bench/overhead_bench.py --quick    # ~1 min

Writes a table to stdout, bench/results/overhead_bench.json and overhead_bench.png.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MiB = 1 << 20
RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Variant:
    name: str
    secure: bool
    verify: bool
    short_circuit: bool


VARIANTS = [
    Variant("plain, crc", False, True, False),
    Variant("plain, no crc", False, False, False),
    Variant("tls+token, crc", True, True, False),
    Variant("plain, crc, short-circuit", False, True, True),
    Variant("plain, no crc, short-circuit", False, False, True),
    Variant("tls+token, crc, short-circuit", True, True, True),
]


def _fill(cluster: Any, large: int, small: int) -> None:
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket="ovh")
    blob = os.urandom(64 * MiB)
    for i in range(large):
        s3.put_object(Bucket="ovh", Key=f"large/f{i}", Body=blob[i:] + blob[:i])
    for i in range(small):
        s3.put_object(Bucket="ovh", Key=f"small/f{i}", Body=os.urandom(20_000))


def _read_all(client: Any, large: int, small: int) -> dict[str, float]:
    out = {}
    start = time.perf_counter()
    with cf.ThreadPoolExecutor(4) as pool:
        total = sum(pool.map(lambda i: len(client.read(f"/ovh/large/f{i}")), range(large)))
    out["large_mb_s"] = total / MiB / (time.perf_counter() - start)
    start = time.perf_counter()
    with cf.ThreadPoolExecutor(16) as pool:
        n = sum(1 for _ in pool.map(lambda i: client.read(f"/ovh/small/f{i}"), range(small)))
    out["small_files_s"] = n / (time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--large", type=int, default=4, help="files of 64 MiB")
    p.add_argument("--small", type=int, default=1000, help="files of 20 KB")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", type=Path, default=RESULTS / "overhead_bench.json")
    p.add_argument("--png", type=Path, default=RESULTS / "overhead_bench.png")
    args = p.parse_args(argv)
    if args.quick:
        args.large, args.small, args.rounds = 2, 300, 3

    from reservoir.client import Client
    from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

    os.environ.update(DEV_CREDENTIALS)
    clusters = {
        secure: LocalCluster.up(
            Path(tempfile.mkdtemp(prefix="ovh-")),
            workers=2,
            capacity="2GiB",
            shm=True,
            secure=secure,
        )
        for secure in (False, True)
    }
    runs: dict[str, list[dict[str, float]]] = {v.name: [] for v in VARIANTS}
    try:
        for cluster in clusters.values():
            _fill(cluster, args.large, args.small)
            with Client(config=cluster.client_config("admin", short_circuit=False)) as c:
                c.mount("/ovh", "s3://ovh/", endpoint_url=cluster.s3_endpoint)
                _read_all(c, args.large, args.small)  # warm: every block cached
        for round_ in range(args.rounds):
            order = VARIANTS[round_ % len(VARIANTS) :] + VARIANTS[: round_ % len(VARIANTS)]
            for v in order:
                cluster = clusters[v.secure]
                config = cluster.client_config(
                    "reader", short_circuit=v.short_circuit, verify_checksums=v.verify
                )
                with Client(config=config) as c:
                    c.ls("/ovh/large")
                    c.ls("/ovh/small")
                    result = _read_all(c, args.large, args.small)
                runs[v.name].append(result)
                print(
                    f"  round {round_ + 1} {v.name:<32} {result['large_mb_s']:8.0f} MB/s "
                    f"{result['small_files_s']:8.0f} files/s",
                    file=sys.stderr,
                )
    finally:
        for cluster in clusters.values():
            cluster.down()

    base_name = {False: "plain, crc", True: "plain, crc, short-circuit"}
    rows = []
    for v in VARIANTS:
        large = statistics.median(r["large_mb_s"] for r in runs[v.name])
        small = statistics.median(r["small_files_s"] for r in runs[v.name])
        base = runs[base_name[v.short_circuit]]
        rows.append(
            {
                "variant": v.name,
                "large_mb_s": large,
                "small_files_s": small,
                "large_ratio": large / statistics.median(r["large_mb_s"] for r in base),
                "small_ratio": small / statistics.median(r["small_files_s"] for r in base),
                "runs": runs[v.name],
            }
        )
    header = f"{'variant':<32} {'large MB/s':>10} {'x base':>7} {'small files/s':>14} {'x base':>7}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['variant']:<32} {r['large_mb_s']:>10.0f} {r['large_ratio']:>7.2f} "
            f"{r['small_files_s']:>14.0f} {r['small_ratio']:>7.2f}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"args": vars(args) | {"json": "", "png": ""}, "rows": rows}))
    _plot(rows, args.png)
    return 0


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    names = [r["variant"] for r in rows]
    for ax, key, label in (
        (axes[0], "large_mb_s", "large files, MB/s"),
        (axes[1], "small_files_s", "small files, files/s"),
    ):
        ax.barh(names, [r[key] for r in rows], color=["C0", "C1", "C2"] * 2)
        ax.set_xlabel(label)
        ax.invert_yaxis()
    axes[1].set_yticklabels([])
    fig.suptitle("Warm reads: checksum check and TLS + tokens (medians)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    raise SystemExit(main())
