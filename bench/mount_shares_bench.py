"""Per-mount quota shares on one worker: what fair eviction buys, and what it costs.

1. Fairness. Mount A reads a working set of 40 % of the cache; mount B scans 10× the
   cache; A reads one block of its set for every `--scan-per-read` blocks B reads. A's hit
   ratio (after warm-up) and its bytes held, with each eviction policy, without a quota
   (the policy alone decides) and with A's quota at 40 % (worker/mount_shares.py).
2. Cost. Microseconds per miss kept in a full cache (the fetched block offered, room made)
   with shares off (no mount has a quota) and on (A and B as above), at several cache
   sizes in blocks: fair victims come from each mount's own list, so the cost should not
   grow with the blocks held.

The worker's real MemoryTier, TieredStore and MountShares; blocks of 1 KiB; no sockets.
Writes a table to stdout, JSON and a PNG to bench/results/.

    python bench/mount_shares_bench.py            # ~1 min
    python bench/mount_shares_bench.py --quick    # ~10 s
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from reservoir.common.models import Mount, MountOptions
from reservoir.worker.eviction import POLICIES, new_policy
from reservoir.worker.fair_eviction import FairEviction
from reservoir.worker.memory_tier import NO_PINS, BlockId, MemoryTier
from reservoir.worker.mount_shares import MountShares
from reservoir.worker.tiered_store import TieredStore

RESULTS = Path(__file__).parent / "results"
BLOCK = 1024
DATA = b"x" * BLOCK


class _Owner:
    def __init__(self, shares: MountShares) -> None:
        self.shares = shares

    def block_gone(self, block: BlockId, size: int, tier: str) -> None:
        self.shares.gone(block)

    def block_corrupt(self, block: BlockId, tier: str, error: str) -> None:
        raise AssertionError(error)


def _worker(policy: str, blocks: int, quota_a: int) -> tuple[TieredStore, MountShares]:
    capacity = blocks * BLOCK
    shares = MountShares(NO_PINS)
    shares.weight = 1.0
    memory = MemoryTier(capacity, None, new_policy(policy, capacity))
    memory.order = FairEviction(shares, capacity)
    store = TieredStore(
        memory, [], _Owner(shares), io_threads=1, scan_parallelism=1, write_queue_bytes=0
    )
    shares.mount_changed(Mount("/a", "s3://a/", MountOptions(quota_bytes=quota_a)))
    shares.mount_changed(Mount("/b", "s3://b/", MountOptions()))
    return store, shares


def _read(store: TieredStore, shares: MountShares, mount: str, block: BlockId) -> bool:
    shares.read(block, mount)
    if store.memory.get(block) is not None:
        return True
    shares.keep(store, mount, block, DATA, 0, 0)
    return False


def fairness(
    policy: str, blocks: int, quota: bool, scan_per_read: int, seed: int
) -> dict[str, Any]:
    working = int(blocks * 0.4)
    store, shares = _worker(policy, blocks, working * BLOCK if quota else 0)
    rng = random.Random(seed)
    hot = [("a", i) for i in range(working)]
    for _ in range(3):
        for block in rng.sample(hot, len(hot)):
            _read(store, shares, "/a", block)
    hits = reads = 0
    for n in range(10 * blocks):
        _read(store, shares, "/b", ("scan", n))
        if n % scan_per_read == 0:
            hits += _read(store, shares, "/a", rng.choice(hot))
            reads += 1
    return {
        "policy": policy,
        "quota": quota,
        "a_hit_ratio": hits / reads,
        "a_bytes_over_working_set": shares.bytes_of("/a") / (working * BLOCK),
    }


def cost(blocks: int, active: bool, misses: int, repeats: int) -> float:
    """Microseconds per miss kept into a full cache (LRU, B scanning past A's share): the
    best of `repeats` runs (the machine is shared; the best run is the least disturbed)."""
    return min(_cost_once(blocks, active, misses) for _ in range(repeats))


def _cost_once(blocks: int, active: bool, misses: int) -> float:
    store, shares = _worker("lru", blocks, int(blocks * 0.4) * BLOCK if active else 0)
    for i in range(int(blocks * 0.4)):
        _read(store, shares, "/a", ("a", i))
    for n in range(blocks):
        _read(store, shares, "/b", ("fill", n))
    started = time.perf_counter()
    for n in range(misses):
        _read(store, shares, "/b", ("scan", n))
    return (time.perf_counter() - started) / misses * 1e6


def plot(fair: list[dict[str, Any]], costs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    labels = [f"{r['policy']}\n{'quota 40 %' if r['quota'] else 'no quota'}" for r in fair]
    left.bar(labels, [r["a_hit_ratio"] for r in fair], color="tab:blue")
    left.axhline(0.95, color="grey", linestyle=":", label="0.95")
    left.set_ylim(0, 1.05)
    left.set_ylabel("A's hit ratio while B scans 10x the cache")
    left.legend()
    for active in (False, True):
        mine = [r for r in costs if r["shares_on"] == active]
        right.plot(
            [r["blocks"] for r in mine],
            [r["us_per_miss"] for r in mine],
            marker="o",
            label="shares on" if active else "shares off",
        )
    right.set_xscale("log")
    right.set_xlabel("cache size (blocks)")
    right.set_ylabel("µs per miss kept (full cache)")
    right.set_ylim(bottom=0)
    right.grid(alpha=0.3)
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=2000, help="cache size for the fairness runs")
    p.add_argument("--scan-per-read", type=int, default=4)
    p.add_argument("--sizes", default="1000,10000,100000", help="cache sizes for the cost runs")
    p.add_argument("--misses", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="500 blocks; sizes 1000,10000")
    p.add_argument("--json", type=Path, default=RESULTS / "mount_shares_bench.json")
    p.add_argument("--png", type=Path, default=RESULTS / "mount_shares_bench.png")
    args = p.parse_args(argv)
    if args.quick:
        args.blocks, args.sizes, args.misses = 500, "1000,10000", 5000
    sizes = [int(s) for s in args.sizes.split(",")]
    fair = [
        fairness(policy, args.blocks, quota, args.scan_per_read, args.seed)
        for policy in POLICIES
        for quota in (False, True)
    ]
    costs = [
        {
            "blocks": n,
            "shares_on": active,
            "us_per_miss": cost(n, active, args.misses, args.repeats),
        }
        for n in sizes
        for active in (False, True)
    ]
    print(
        f"fairness: cache {args.blocks} blocks, A's working set 40 %, B scans 10x, "
        f"{args.scan_per_read} B reads per A read"
    )
    print(f"{'policy':>8} {'A quota':>8} {'A hit ratio':>12} {'A held / set':>13}")
    for r in fair:
        quota = "40 %" if r["quota"] else "none"
        print(
            f"{r['policy']:>8} {quota:>8} {r['a_hit_ratio']:>12.3f} "
            f"{r['a_bytes_over_working_set']:>13.2f}"
        )
    print(
        f"cost: µs per miss kept into a full cache (LRU), {args.misses} misses, "
        f"best of {args.repeats}"
    )
    print(f"{'blocks':>8} {'shares off':>11} {'shares on':>10}")
    for n in sizes:
        off, on = (
            next(r["us_per_miss"] for r in costs if r["blocks"] == n and r["shares_on"] == a)
            for a in (False, True)
        )
        print(f"{n:>8} {off:>11.1f} {on:>10.1f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {"args": {k: str(v) for k, v in vars(args).items()}, "fairness": fair, "cost": costs},
            indent=2,
        )
    )
    plot(fair, costs, args.png)
    print(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
