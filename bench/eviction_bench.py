"""Eviction policies on shuffled epochs: hit ratio against cache size.

Each epoch reads every block of a data set once, in a new random order (what a training
job's data loader does). The cache is the worker's real `MemoryTier` with each policy of
worker/eviction.py, at 10 %..100 % of the data set; the hit ratio shown is the mean over
epochs 2+ (epoch 1 is all misses for any policy). A second table is the guard on the
other side: a hot set of 80 % of the cache that gets 97 % of the requests, the rest
one-off reads. Writes a table to stdout, JSON and a PNG plot to bench/results/.

    python bench/eviction_bench.py            # ~1 min: 4000 blocks, 5 epochs
    python bench/eviction_bench.py --quick    # ~10 s: 1000 blocks, 4 epochs
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from reservoir.worker.eviction import POLICIES, new_policy
from reservoir.worker.memory_tier import BlockId, MemoryTier

RESULTS = Path(__file__).parent / "results"
FRACTIONS = [f / 10 for f in range(1, 11)]
ONE = b"x"  # one-byte blocks: capacities count blocks


def _read(tier: MemoryTier, block: BlockId) -> bool:
    if tier.get(block) is not None:
        return True
    tier.put(block, ONE, 0, 0)
    return False


def shuffled_epochs(
    policy: str, blocks: int, fraction: float, epochs: int, seed: int
) -> list[float]:
    capacity = max(1, int(blocks * fraction))
    tier = MemoryTier(capacity, lambda b, n: None, new_policy(policy, capacity))
    order = [("f", i) for i in range(blocks)]
    rng = random.Random(seed)
    ratios = []
    for _ in range(epochs):
        rng.shuffle(order)
        ratios.append(sum(_read(tier, b) for b in order) / blocks)
    return ratios


def hot_set(policy: str, capacity: int, requests: int, seed: int) -> float:
    tier = MemoryTier(capacity, lambda b, n: None, new_policy(policy, capacity))
    rng = random.Random(seed)
    hits = 0
    for n in range(requests):
        block = ("hot", rng.randrange(capacity * 8 // 10)) if rng.random() < 0.97 else ("x", n)
        hit = _read(tier, block)
        hits += hit if n >= requests // 2 else 0
    return hits / (requests - requests // 2)


def plot(rows: list[dict[str, Any]], path: Path, blocks: int, epochs: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy in POLICIES:
        mine = [r for r in rows if r["policy"] == policy]
        ax.plot(
            [100 * r["fraction"] for r in mine],
            [r["hit_ratio"] for r in mine],
            marker="o",
            label=policy,
        )
    ax.plot([10, 100], [0.1, 1.0], color="grey", linestyle=":", label="ideal (= fraction)")
    ax.set_xlabel("cache size (% of the data set)")
    ax.set_ylabel(f"hit ratio, epochs 2-{epochs}")
    ax.set_title(f"Shuffled epochs, {blocks} blocks")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=4000)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="1000 blocks, 4 epochs")
    p.add_argument("--json", type=Path, default=RESULTS / "eviction_bench.json")
    p.add_argument("--png", type=Path, default=RESULTS / "eviction_bench.png")
    args = p.parse_args(argv)
    if args.quick:
        args.blocks, args.epochs = 1000, 4
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for policy in POLICIES:
        for fraction in FRACTIONS:
            ratios = shuffled_epochs(policy, args.blocks, fraction, args.epochs, args.seed)
            later = ratios[1:]
            rows.append(
                {
                    "policy": policy,
                    "fraction": fraction,
                    "hit_ratio": sum(later) / len(later),
                    "min_epoch_hit_ratio": min(later),
                    "epochs": ratios,
                }
            )
    hot = {
        policy: hot_set(policy, args.blocks // 4, 40 * args.blocks // 4, args.seed)
        for policy in POLICIES
    }
    print(f"shuffled epochs: {args.blocks} blocks, {args.epochs} epochs, hit ratio of epochs 2+")
    print(f"{'cache %':>8} " + " ".join(f"{p + ' mean':>13} {p + ' min':>12}" for p in POLICIES))
    for fraction in FRACTIONS:
        cells = []
        for policy in POLICIES:
            r = next(r for r in rows if r["policy"] == policy and r["fraction"] == fraction)
            cells.append(f"{r['hit_ratio']:>13.3f} {r['min_epoch_hit_ratio']:>12.3f}")
        print(f"{100 * fraction:>7.0f}% " + " ".join(cells))
    print("hot set (80 % of the cache, 97 % of requests), hit ratio after warm-up:")
    print("  " + "  ".join(f"{p}: {v:.3f}" for p, v in hot.items()))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "blocks": args.blocks,
                "epochs": args.epochs,
                "seed": args.seed,
                "shuffled": rows,
                "hot_set": hot,
                "seconds": time.perf_counter() - started,
            },
            indent=2,
        )
    )
    plot(rows, args.png, args.blocks, args.epochs)
    print(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
