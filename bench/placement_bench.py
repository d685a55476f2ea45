"""Block placement at 10 to 1,000 workers: cost per block, balance, movement.

Simulated worker lists (no servers): for each size, the Maglev table of
common/placement.py against the weighted rendezvous hashing it replaced (reproduced here
as the baseline: every worker scored and sorted for every block). Columns:

- build: seconds to build the table for a membership (once per change, per process);
- us/block: median of several runs of a block's first home, and of its first 3 homes
  (failover and replicas), over 20,000 block keys;
- imbalance: the largest deviation of a worker's share of slots from its fair share
  (what it gets of a large data set, in expectation);
- moved on leave / join: fraction of 20,000 blocks whose first home changes when one
  worker leaves (one of the larger ones) or one joins, next to the minimum possible (its
  share: ~1/N).

Writes a table to stdout, JSON and a PNG plot to bench/results/.

    python bench/placement_bench.py            # ~1 min
    python bench/placement_bench.py --quick    # sizes 10 and 100 only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reservoir.common.placement import Candidate, Placement, block_key

RESULTS = Path(__file__).parent / "results"
KEYS = [block_key(f"{i:032x}", i % 7) for i in range(20_000)]


def rendezvous(key: bytes, workers: Sequence[Candidate]) -> list[str]:
    """The placement before this table: weighted rendezvous over every worker."""

    def score(w: Candidate) -> float:
        digest = hashlib.blake2b(key + b"|" + w.id.encode(), digest_size=8).digest()
        unit = (int.from_bytes(digest, "big") + 1) / (2**64 + 1)
        return -max(w.weight, 1e-9) / math.log(unit)

    return [w.id for w in sorted(workers, key=lambda w: (-score(w), w.id))]


def _per_block_us(lookup: Any, keys: Sequence[bytes], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for key in keys:
            lookup(key)
        samples.append((time.perf_counter() - start) / len(keys) * 1e6)
    return statistics.median(samples)


def _moved(before: Placement, after: Placement) -> float:
    changed = sum(before.homes(k)[0] != after.homes(k)[0] for k in KEYS)
    return changed / len(KEYS)


def measure(n: int, runs: int) -> dict[str, Any]:
    # Capacities as a real fleet has them: most nodes alike, some twice as large.
    workers = [Candidate(f"node-{i:04d}", 2.0 if i % 5 == 0 else 1.0) for i in range(n)]
    start = time.perf_counter()
    table = Placement(workers)
    build_s = time.perf_counter() - start
    total = sum(w.weight for w in workers)
    shares = table.shares()
    imbalance = max(abs(shares[w.id] / (w.weight / total) - 1) for w in workers)
    # The old way scores every worker: fewer keys at large N keep the run short.
    baseline_keys = KEYS[: max(200, 20_000 // n)]
    return {
        "workers": n,
        "build_s": build_s,
        "us_per_block": _per_block_us(table.homes, KEYS, runs),
        "us_per_block_3_homes": _per_block_us(lambda k: table.homes(k, 3), KEYS, runs),
        "rendezvous_us_per_block": _per_block_us(
            lambda k: rendezvous(k, workers), baseline_keys, runs
        ),
        "imbalance": imbalance,
        "moved_on_leave": _moved(table, Placement(workers[: n // 2] + workers[n // 2 + 1 :])),
        # The least any placement can move: the leaver's share, the newcomer's share.
        "min_moved_on_leave": workers[n // 2].weight / total,
        "moved_on_join": _moved(table, Placement([*workers, Candidate("node-new")])),
        "min_moved_on_join": 1.0 / (total + 1.0),
    }


def report(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'workers':>7} {'build s':>8} {'us/block':>9} {'us/3 homes':>10} "
        f"{'rendezvous us':>13} {'imbalance':>9} {'moved leave':>11} {'min':>6} "
        f"{'moved join':>10} {'min':>6}"
    ]
    for r in rows:
        n = r["workers"]
        lines.append(
            f"{n:>7} {r['build_s']:>8.2f} {r['us_per_block']:>9.2f} "
            f"{r['us_per_block_3_homes']:>10.2f} {r['rendezvous_us_per_block']:>13.1f} "
            f"{100 * r['imbalance']:>8.2f}% {100 * r['moved_on_leave']:>10.2f}% "
            f"{100 * r['min_moved_on_leave']:>5.2f}% {100 * r['moved_on_join']:>9.2f}% "
            f"{100 * r['min_moved_on_join']:>5.2f}%"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["workers"] for r in rows]
    fig, (cost, moved) = plt.subplots(1, 2, figsize=(11, 4.5))
    cost.plot(sizes, [r["us_per_block"] for r in rows], marker="o", label="Maglev table")
    cost.plot(sizes, [r["us_per_block_3_homes"] for r in rows], marker="o", label="table, 3 homes")
    cost.plot(sizes, [r["rendezvous_us_per_block"] for r in rows], marker="s", label="rendezvous")
    cost.axhline(5, color="grey", linestyle=":", label="target 5 us")
    cost.set_xscale("log")
    cost.set_yscale("log")
    cost.set_xlabel("workers")
    cost.set_ylabel("us per block")
    cost.set_title("Placement cost per block")
    cost.grid(alpha=0.3)
    cost.legend()
    moved.plot(sizes, [100 * r["moved_on_leave"] for r in rows], marker="o", label="one leaves")
    moved.plot(sizes, [100 * r["moved_on_join"] for r in rows], marker="o", label="one joins")
    least = [100 * r["min_moved_on_leave"] for r in rows]
    moved.plot(sizes, least, color="grey", linestyle=":", label="leaver's share (minimum)")
    moved.plot(sizes, [m + 1 for m in least], color="red", linestyle=":", label="target: + 1 %")
    moved.set_xscale("log")
    moved.set_yscale("log")
    moved.set_xlabel("workers")
    moved.set_ylabel("% of blocks whose home changes")
    moved.set_title("Movement on membership change")
    moved.grid(alpha=0.3)
    moved.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="10 and 100 workers only")
    p.add_argument("--runs", type=int, default=5, help="runs per timing (the median is shown)")
    p.add_argument("--json", type=Path, default=RESULTS / "placement_bench.json")
    p.add_argument("--png", type=Path, default=RESULTS / "placement_bench.png")
    args = p.parse_args(argv)
    sizes = [10, 100] if args.quick else [10, 30, 100, 300, 1000]
    rows = [measure(n, args.runs) for n in sizes]
    print(report(rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"keys": len(KEYS), "rows": rows}, indent=2))
    plot(rows, args.png)
    print(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
