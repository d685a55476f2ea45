"""The master's locality tally over 1M cached blocks: seconds per call, in memory.

What `Locality(path)` costs beyond the namespace walk that `Report(path)` already does
(the same pages of (size, block size, file id) from etcd): the lookup of each file's
held blocks in the location table and the sums per host, zone and region. A synthetic
table (no servers): 6 workers on 3 hosts in 2 zones, every block held once or twice,
for three shapes of 1M blocks: many small files (1 block each), medium (10 blocks),
large (1,000 blocks). Columns: files, blocks, replicas, seconds (median of 3), blocks/s.

Writes a table to stdout, JSON and a PNG plot to bench/results/.

    python bench/locality_bench.py            # ~1 min, ~1.5 GB of memory
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from reservoir.master.locality import LocalityTally, Place
from reservoir.master.locations import BlockLocationTable

RESULTS = Path(__file__).parent / "results"
BLOCKS = 1_000_000
BLOCK_SIZE = 4 * 1024 * 1024
PAGE = 1000  # files per page, as the namespace walk yields them
PLACES = {
    f"w{i}": Place(f"host-{i // 2}", f"zone-{i // 4}", "region-1") for i in range(6)
}  # 2 workers per host
WORKERS = sorted(PLACES)


def _table(files: int, per_file: int, replicas: int) -> BlockLocationTable:
    table = BlockLocationTable(store=None)  # type: ignore[arg-type]  # never flushed here
    for f in range(files):
        file_id = f"{f:032x}"
        for index in range(per_file):
            for r in range(replicas):
                table.record(WORKERS[(f + index + 3 * r) % len(WORKERS)], file_id, index)
    return table


def _pages(files: int, per_file: int) -> list[list[tuple[int, int, str]]]:
    size = per_file * BLOCK_SIZE - 1  # a short last block
    rows = [(size, BLOCK_SIZE, f"{f:032x}") for f in range(files)]
    return [rows[i : i + PAGE] for i in range(0, files, PAGE)]


def run(files: int, per_file: int, replicas: int) -> dict[str, Any]:
    table = _table(files, per_file, replicas)
    pages = _pages(files, per_file)
    samples, cpu = [], []
    for _ in range(3):
        start, start_cpu = time.perf_counter(), time.process_time()
        tally = LocalityTally(PLACES, table)
        for page in pages:
            tally.add(page)
        found = tally.result("/bench")
        samples.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    assert found.cached_bytes == found.bytes, "every block is cached"
    seconds = statistics.median(samples)
    return {
        "files": files,
        "blocks": files * per_file,
        "replicas": replicas,
        "seconds": round(seconds, 3),
        # Wall time on a shared machine includes waiting for a core; CPU time does not.
        "cpu_seconds": round(statistics.median(cpu), 3),
        "blocks_per_s": round(files * per_file / seconds),
    }


def report(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'files':>9} {'blocks':>9} {'replicas':>8} {'seconds':>8} {'cpu s':>8} {'blocks/s':>11}"
    ]
    for r in rows:
        lines.append(
            f"{r['files']:>9} {r['blocks']:>9} {r['replicas']:>8} {r['seconds']:>8.3f}"
            f" {r['cpu_seconds']:>8.3f} {r['blocks_per_s']:>11,}"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{r['files']:,} files\n{r['replicas']} replica(s)" for r in rows]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["seconds"] for r in rows], 0.4, label="wall")
    ax.bar([i + 0.2 for i in x], [r["cpu_seconds"] for r in rows], 0.4, label="CPU")
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.axhline(1.0, color="tab:red", linestyle="--", label="budget: 1 s")
    ax.set_ylabel("seconds per Locality tally (1M blocks)")
    ax.set_title("Locality: tally of 1M cached blocks (6 workers, 3 hosts)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", type=Path, default=RESULTS / "locality_bench.json")
    p.add_argument("--png", type=Path, default=RESULTS / "locality_bench.png")
    args = p.parse_args(argv)
    rows = []
    for per_file in (1, 10, 1000):
        for replicas in (1, 2):
            rows.append(run(BLOCKS // per_file, per_file, replicas))
            print(report(rows[-1:]).splitlines()[-1], flush=True)
    print(report(rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"blocks": BLOCKS, "rows": rows}, indent=2))
    plot(rows, args.png)
    print(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
