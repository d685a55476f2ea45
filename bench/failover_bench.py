"""Master takeover times: kill (or stop) the leader over and over, time until metadata
calls work again.

    python bench/failover_bench.py                      # 10 SIGKILLs and 10 SIGTERMs, 3 masters
    python bench/failover_bench.py --kills 20 --lease-ttl 3 --json results/failover.json
    python bench/failover_bench.py --kills 0 --terms 0   # only what a standby's redirect costs
    python bench/failover_bench.py --kills 0 --terms 0 --stops 10   # a frozen leader

One local cluster (etcd, the S3 server, `--masters` masters, one worker). Each round: the
leader is found (`Client.masters`), a client that has never seen the directory is made,
the leader is sent the signal, and the time is taken until that client's `stat` of an
unseen file answers (it follows the new leader by itself: the first call is the one
timed, its own retries included). The dead master is started again before the next
round, so every round has the same number of standbys. A SIGSTOP round ("frozen
leader") times the same call with the leader frozen, then thaws it (SIGCONT: it wakes as a
standby) and waits until one master leads and the others know it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster

BUCKET = "failover-bench"
# Issue #19/#32: metadata calls back within this long of the leader's loss or freeze.
TARGET_S = 5.0


def leader_process(c: Client, cluster: LocalCluster) -> str:
    (leader,) = [m for m in c.masters() if m.role == "leader"]
    for name in cluster.master_names():
        if f"127.0.0.1:{cluster.processes[name].port}" == leader.address:
            return name
    raise RuntimeError(f"no process at {leader.address}")


def one_round(cluster: LocalCluster, sig: int, round_no: int) -> float:
    with Client(cluster.master_address) as c:
        name = leader_process(c, cluster)
    with Client(cluster.master_address) as fresh:
        if sig == signal.SIGKILL:
            start = time.monotonic()
            cluster.kill(name, sig)
        else:
            os.kill(cluster.processes[name].pid, sig)
            start = time.monotonic()
        fresh.stat(f"/b/f{round_no:03d}")
        took = time.monotonic() - start
    if sig != signal.SIGKILL:
        cluster.stop(name)  # waits for the SIGTERMed process to exit
    cluster.restart(name)
    return took


def frozen_round(cluster: LocalCluster, round_no: int) -> float:
    """Seconds from SIGSTOP of the leader to a fresh client's first answered call."""
    with Client(cluster.master_address) as c:
        name = leader_process(c, cluster)
    pid = cluster.processes[name].pid
    with Client(cluster.master_address) as fresh:
        os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        try:
            fresh.stat(f"/b/f{round_no:03d}")
            took = time.monotonic() - start
        finally:
            os.kill(pid, signal.SIGCONT)
    settled_within = time.monotonic() + 60
    while time.monotonic() < settled_within:
        with Client(cluster.master_address) as c:
            try:
                listed = c.masters()
            except ConnectionError:
                listed = []
        terms = {m.term for m in listed}
        roles = sorted(m.role for m in listed)
        one_leader = roles.count("leader") == 1 and len(terms) == 1
        if one_leader and len(listed) == len(cluster.master_names()):
            return took
        time.sleep(0.2)
    raise RuntimeError("the masters did not settle after SIGCONT")


def redirect_cost_ms(cluster: LocalCluster, rounds: int = 30) -> dict[str, float]:
    """Median first metadata call of a new client (connected, nothing asked yet) that
    knows the leader, and of one that knows only a standby (refused, sent on); then that
    client's later calls, which go to the leader directly."""
    with Client(cluster.master_address) as c:
        roles = {m.address: m.role for m in c.masters()}
    leader = next(a for a, r in roles.items() if r == "leader")
    standby = next(a for a, r in roles.items() if r == "standby")

    def first(master: str) -> float:
        times = []
        for i in range(rounds):
            with Client(master) as c:
                c.masters()  # the connection, which every master answers
                start = time.perf_counter()
                c.stat(f"/b/f{i % 10:03d}", with_locations=True)  # always asks the master
                times.append(time.perf_counter() - start)
        return statistics.median(times) * 1000

    with Client(standby) as c:
        c.stat("/b/f000", with_locations=True)
        later = []
        for i in range(rounds):
            start = time.perf_counter()
            c.stat(f"/b/f{i % 10:03d}", with_locations=True)
            later.append(time.perf_counter() - start)
    return {
        "first_call_via_leader_ms": round(first(leader), 2),
        "first_call_via_standby_ms": round(first(standby), 2),
        "later_calls_ms": round(statistics.median(later) * 1000, 2),
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def plot(results: dict[str, list[float]], path: Path, lease_ttl_s: int) -> None:
    """Each round's time to the first answered call, one row per signal, with the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(kind, times) for kind, times in results.items() if times]
    fig, ax = plt.subplots(figsize=(8, 0.8 * len(rows) + 1.6))
    for y, (_, times) in enumerate(rows):
        ax.scatter(times, [y] * len(times), alpha=0.6)
        ax.plot([statistics.median(times)] * 2, [y - 0.3, y + 0.3], color="black")
    ax.axvline(TARGET_S, color="#c62828", linestyle="--", label=f"target {TARGET_S:.0f} s")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([kind for kind, _ in rows])
    ax.set_xlim(0, max(TARGET_S, *(max(t) for _, t in rows)) * 1.1)
    ax.set_xlabel("seconds from the signal to a new client's first answered call (bar: p50)")
    ax.set_title(f"master takeover, 3 masters, lease TTL {lease_ttl_s} s", fontsize=10)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--masters", type=int, default=3)
    parser.add_argument("--kills", type=int, default=10, help="SIGKILL rounds (default 10)")
    parser.add_argument("--terms", type=int, default=10, help="SIGTERM rounds (default 10)")
    parser.add_argument("--stops", type=int, default=0, help="SIGSTOP rounds (default 0)")
    parser.add_argument(
        "--lease-ttl", type=int, default=3, help="RESERVOIR_MASTER_LEASE_TTL, seconds"
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--png", type=Path, help="draw each round's time here")
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="failover-bench-"))
    cluster = LocalCluster.up(
        state,
        workers=1,
        masters=args.masters,
        env={"RESERVOIR_MASTER_LEASE_TTL": str(args.lease_ttl)},
    )
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket=BUCKET)
        rounds = max(10, args.kills + args.terms + args.stops)
        for i in range(rounds):
            s3.put_object(Bucket=BUCKET, Key=f"d/f{i:03d}", Body=b"x" * 1000)
        with Client(cluster.master_address) as c:
            c.mount("/b", f"s3://{BUCKET}/d/", endpoint_url=cluster.s3_endpoint)
        redirects = redirect_cost_ms(cluster)
        print(f"redirect: {redirects}", file=sys.stderr)
        results: dict[str, list[float]] = {"SIGKILL": [], "SIGTERM": [], "SIGSTOP": []}
        for i in range(args.kills):
            results["SIGKILL"].append(one_round(cluster, signal.SIGKILL, i))
            print(f"SIGKILL {i + 1}: {results['SIGKILL'][-1]:.2f} s", file=sys.stderr)
        for i in range(args.terms):
            results["SIGTERM"].append(one_round(cluster, signal.SIGTERM, args.kills + i))
            print(f"SIGTERM {i + 1}: {results['SIGTERM'][-1]:.2f} s", file=sys.stderr)
        for i in range(args.stops):
            results["SIGSTOP"].append(frozen_round(cluster, args.kills + args.terms + i))
            print(f"SIGSTOP {i + 1}: {results['SIGSTOP'][-1]:.2f} s", file=sys.stderr)
    finally:
        cluster.down()
    summary: dict[str, object] = {
        kind: {
            "rounds": len(times),
            "p50_s": round(statistics.median(times), 3),
            "p99_s": round(percentile(times, 0.99), 3),
            "max_s": round(max(times), 3),
            "times_s": [round(t, 3) for t in times],
        }
        for kind, times in results.items()
        if times
    }
    summary["redirect"] = redirects
    summary["settings"] = {
        "masters": args.masters,
        "lease_ttl_s": args.lease_ttl,
        "probe_timeout_s": float(os.environ.get("RESERVOIR_MASTER_PROBE_TIMEOUT", "1")),
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2))
    if args.png:
        plot(results, args.png, args.lease_ttl)


if __name__ == "__main__":
    main()
