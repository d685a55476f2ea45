"""What one ListObjectsV2 page costs through `reservoir gateway`, in directories of
different sizes: the page should cost the same whatever the directory holds.

    python bench/gateway_listing_bench.py                       # 1,000 / 10,000 / 100,000 entries
    python bench/gateway_listing_bench.py --sizes 1000,20000 --runs 3

Starts a local cluster with a gateway; each directory is files made on local disk and
mounted as a `file://` under-store (the master lists it once, into etcd, untimed). Then,
per directory: the first page (`delimiter=/`,
`max-keys=1000`), a page from the middle (`start-after` the middle key: one seek), and a
page resumed from a continuation token near the end, each one HTTP GET (no SDK: the XML
parsing of boto3 would be most of what is timed). Prints milliseconds per page (medians
of --runs) and writes --json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster

HERE = Path(__file__).resolve().parent
PAGE = 1000


def _make_directory(root: Path, entries: int) -> None:
    root.mkdir(parents=True)
    for i in range(entries):
        (root / f"part-{i:07d}.bin").write_bytes(b"x")


def _page(
    url: str, prefix: str, delimiter: str, keys: int, more: dict[str, str], expect: int = -1
) -> str:
    """One ListObjectsV2 page's XML of at most `keys` keys, checked to hold `expect`
    (default: `keys`)."""
    params = {"list-type": "2", "prefix": prefix, "delimiter": delimiter, "max-keys": str(keys)}
    reply = requests.get(url, params=params | more, timeout=60)
    reply.raise_for_status()
    count = int(reply.text.split("<KeyCount>")[1].split("<")[0])
    expect = keys if expect < 0 else expect
    if count != expect:
        raise SystemExit(f"expected {expect} keys in the page, got {count}")
    return reply.text


def _timed(call: Any, *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    page = call(*args)
    return (time.perf_counter() - started) * 1000, page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", default=str(HERE / "results" / "gateway_listing_bench.json"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="gateway-listing-") as tmp:
        cluster = LocalCluster.up(
            Path(tmp) / "cluster",
            workers=1,
            gateway=True,
            # One LIST of the whole directory into etcd, however big (the default lists
            # the first 10,000 and looks the rest up one by one).
            env={
                "RESERVOIR_METADATA_LIST_MAX_ENTRIES": str(max(sizes) + 1),
                "RESERVOIR_ALLOWED_SCHEMES": "s3,file",
            },
        )
        try:
            url = f"{cluster.gateway_url}/big"
            for size in sizes:
                data = Path(tmp) / f"data-{size}"
                _make_directory(data, size)
                # The first listing stores the whole directory: longer than a call's default.
                with Client(config=cluster.client_config(rpc_timeout_s=600)) as rs:
                    rs.mount(f"/big/n{size}", f"file://{data}/", metadata_sync="interval:1h")
                    started = time.perf_counter()
                    count = sum(1 for _ in rs.iter_ls(f"/big/n{size}"))
                    print(
                        f"{size} entries: listed into etcd ({count}) in "
                        f"{time.perf_counter() - started:.1f} s",
                        file=sys.stderr,
                    )
                prefix = f"n{size}/"
                middle = f"{prefix}part-{size // 2:07d}.bin"
                near_end = f"{prefix}part-{max(0, size - PAGE - 10):07d}.bin"
                rows: dict[str, list[float]] = {}
                for _ in range(args.runs):
                    after_middle = min(PAGE, size - size // 2 - 1)
                    for name, params, expect in (
                        ("first page", {}, min(PAGE, size)),
                        (
                            "page from the middle (start-after)",
                            {"start-after": middle},
                            after_middle,
                        ),
                    ):
                        ms, _ = _timed(_page, url, prefix, "/", PAGE, params, expect)
                        rows.setdefault(name, []).append(ms)
                    token = _page(url, prefix, "", 1, {"start-after": near_end})
                    token = token.split("<NextContinuationToken>")[1].split("<")[0]
                    left = min(PAGE, size - max(0, size - PAGE - 10) - 2)
                    resumed = {"continuation-token": token}
                    ms, _ = _timed(_page, url, prefix, "", PAGE, resumed, left)
                    rows.setdefault("page resumed from a token", []).append(ms)
                results[str(size)] = rows
        finally:
            cluster.down()
    names = list(next(iter(results.values())))
    print(
        f"\nms per ListObjectsV2 page of {PAGE} keys through the gateway (medians of {args.runs})"
    )
    print(f"{'directory entries':>18} " + " ".join(f"{n:>36}" for n in names))
    for size, rows in results.items():
        print(
            f"{int(size):>18,} "
            + " ".join(f"{statistics.median(rows[n]):>33.1f} ms" for n in names)
        )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps({"page": PAGE, "runs": args.runs, "ms": results}, indent=2)
    )
    print(f"\nraw numbers: {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
