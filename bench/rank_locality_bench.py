"""Bytes read on the rank's own host, and epoch time, by sampler: DistributedSampler's
split against DistributedCacheAwareSampler's, one rank per host.

    python bench/rank_locality_bench.py            # 1,500 files of 16 KiB, 3 runs
    python bench/rank_locality_bench.py --quick    # 300 files, 1 run
    python bench/rank_locality_bench.py --netns --cap-mbit 200 --files 300 --size 262144
        # workers on hosts of their own (network namespaces, root), each host's link capped

Starts a local cluster (etcd, the tests' S3 server, a master) and three workers that
stand for three hosts (`local add-worker --host h1|h2|h3`, block files in /dev/shm), uploads
--files files, mounts them and reads each once so placement spreads them over the hosts.
Then, per run and per sampler (the order turns each run), each of the three ranks reads its
share for the epoch (`read_many`, --batch files a call) as a client of its own host
(RESERVOIR_HOST = its host), one rank after the other. Measured from the workers' own
counters (bytes served, by worker): bytes another host's worker served are remote; the
rest was read on the rank's host (short-circuit from its block files, or its worker).
Epoch time is the slowest rank's read time. Every file's bytes are checked.

On one machine "another host" is loopback: remote reads here cost a data-port round trip,
not a network link; the fraction is what carries over to real hosts, the time less so.
With --netns each worker runs in a network namespace of its own at its own address
(tests/integration/hosts_cluster.py; needs root and iproute2), the ranks in the root
namespace told their host, and --cap-mbit caps what each host sends onto the network (tbf
on its link): a remote read crosses a capped link, a rank's own host's block files do not.
Prints a table (medians of --runs), writes --json and --png.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed.results import log, machine_info  # noqa: E402 - bench/ is not a package

HERE = Path(__file__).resolve().parent
HOSTS = ["h1", "h2", "h3"]
MOUNT = "/rank-bench"
PLAIN = "DistributedSampler"
LOCAL = "DistributedCacheAwareSampler"


def served_by_host(client: Any) -> dict[str, int]:
    hosts = {w.id: w.host for w in client.workers()}
    served = dict.fromkeys(HOSTS, 0)
    for stats in client.worker_stats():
        served[hosts[stats.worker_id]] += sum(stats.bytes_served.values())
    return served


def shares_of(sampler: str, paths: list[str], client: Any, epoch: int) -> list[list[int]]:
    from torch.utils.data import DistributedSampler

    from reservoir.torch import DistributedCacheAwareSampler

    out = []
    for rank in range(len(HOSTS)):
        s: Any
        if sampler == LOCAL:
            s = DistributedCacheAwareSampler(paths, 3, rank, hosts=HOSTS, client=client, seed=1)
        else:
            s = DistributedSampler(range(len(paths)), num_replicas=3, rank=rank, seed=1)  # type: ignore[arg-type]
        s.set_epoch(epoch)
        out.append(list(s))
    return out


def epoch(
    cluster: Any, paths: list[str], bodies: dict[str, bytes], shares: list[list[int]], batch: int
) -> dict[str, Any]:
    from reservoir.client import Client

    remote = total = 0
    seconds = []
    for rank, share in enumerate(shares):
        wanted = [paths[i] for i in share]
        with Client(config=cluster.client_config(host=HOSTS[rank])) as c:
            c.read_many(wanted[:1])  # the worker list and first hop, outside the timing
            before = served_by_host(c)
            started = time.perf_counter()
            got = []
            for start in range(0, len(wanted), batch):
                got += c.read_many(wanted[start : start + batch])
            seconds.append(time.perf_counter() - started)
            after = served_by_host(c)
        if any(data != bodies[p] for p, data in zip(wanted, got, strict=True)):
            raise RuntimeError(f"rank {rank}: wrong bytes")
        remote += sum(after[h] - before[h] for h in HOSTS if h != HOSTS[rank])
        total += sum(len(bodies[p]) for p in wanted)
    return {
        "local_fraction": 1 - remote / total,
        "remote_bytes": remote,
        "bytes": total,
        "epoch_seconds": max(seconds),
        "rank_seconds": seconds,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=1500)
    p.add_argument("--size", type=int, default=16 * 1024)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--quick", action="store_true", help="300 files, 1 run")
    p.add_argument("--netns", action="store_true", help="workers on hosts of their own")
    p.add_argument("--cap-mbit", type=int, default=0, help="with --netns: each host's link")
    p.add_argument("--json", default=str(HERE / "results" / "rank_locality_bench.json"))
    p.add_argument("--png", default=str(HERE / "results" / "rank_locality_bench.png"))
    args = p.parse_args(argv)
    if args.quick:
        args.files, args.runs = 300, 1

    from reservoir.client import Client
    from reservoir.local.cluster import LocalCluster
    from reservoir.local.worker_changes import add_worker
    from reservoir.local.worker_roster import WorkerOptions

    results: dict[str, list[dict[str, Any]]] = {PLAIN: [], LOCAL: []}
    with tempfile.TemporaryDirectory(prefix="rank-bench-") as tmp, contextlib.ExitStack() as stack:
        cluster: Any
        if args.netns:
            cluster = stack.enter_context(_hosts_cluster(Path(tmp), args.cap_mbit))
        else:
            cluster = LocalCluster.up(Path(tmp) / "c", workers=0, shm=True, capacity="1GiB")
            stack.callback(cluster.down)
            for host in HOSTS:
                add_worker(cluster, WorkerOptions(host=host))
        bucket = f"rank-{uuid.uuid4().hex[:8]}"
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket=bucket)
        paths = [f"{MOUNT}/f{i:05d}" for i in range(args.files)]
        bodies = {path: os.urandom(args.size) for path in paths}
        for path, body in bodies.items():
            s3.put_object(Bucket=bucket, Key=path.rsplit("/", 1)[1], Body=body)
        log(f"uploaded {args.files} files of {args.size} B")
        with Client(config=cluster.client_config(host="setup")) as c:
            deadline = time.monotonic() + 60
            while {w.host for w in c.workers()} != set(HOSTS):
                if time.monotonic() > deadline:
                    raise RuntimeError("workers did not register")
                time.sleep(0.2)
            c.mount(MOUNT, f"s3://{bucket}/", endpoint_url=cluster.s3_endpoint)
            for start in range(0, len(paths), 256):
                c.read_many(paths[start : start + 256])
            while not all(i.locations.get(0) for i in c.stat_many(paths, with_locations=True)):
                if time.monotonic() > deadline:
                    raise RuntimeError("locations not reported")
                time.sleep(0.2)
            for run in range(args.runs):
                order = [PLAIN, LOCAL] if run % 2 == 0 else [LOCAL, PLAIN]
                for sampler in order:
                    shares = shares_of(sampler, paths, c, epoch=run)
                    row = epoch(cluster, paths, bodies, shares, args.batch)
                    results[sampler].append(row)
                    log(f"run {run} {sampler}: {row['local_fraction']:.3f} local, "
                        f"{row['epoch_seconds']:.2f} s")  # fmt: skip

    summary = {
        sampler: {
            "local_fraction": statistics.median(r["local_fraction"] for r in rows),
            "epoch_seconds": statistics.median(r["epoch_seconds"] for r in rows),
            "epoch_seconds_min_max": [
                min(r["epoch_seconds"] for r in rows),
                max(r["epoch_seconds"] for r in rows),
            ],
        }
        for sampler, rows in results.items()
    }
    print(f"{'sampler':<30} {'bytes on own host':>18} {'epoch s (median)':>17}")
    for sampler, s in summary.items():
        print(f"{sampler:<30} {s['local_fraction']:>17.1%} {s['epoch_seconds']:>17.2f}")
    document = {
        "bench": "rank_locality_bench",
        "settings": {k: v for k, v in vars(args).items() if k not in ("json", "png")},
        "epoch_speedup": summary[PLAIN]["epoch_seconds"] / summary[LOCAL]["epoch_seconds"],
        "machine": machine_info(),
        "summary": summary,
        "runs": results,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    plot(summary, Path(args.png))


class _HostsCluster:
    """What the bench asks of a cluster, for one whose workers are on hosts of their own."""

    def __init__(self, master: str, s3_endpoint: str) -> None:
        self.master, self.s3_endpoint = master, s3_endpoint

    def client_config(self, host: str) -> Any:
        from reservoir.common.config import ClientConfig, SecuritySettings

        return ClientConfig(master=self.master, host=host, security=SecuritySettings())

    def s3_client(self) -> Any:
        import boto3

        from reservoir.local.cluster import DEV_CREDENTIALS

        return boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            region_name="us-east-1",
            aws_access_key_id=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )


@contextlib.contextmanager
def _hosts_cluster(state: Path, cap_mbit: int) -> Iterator[_HostsCluster]:
    sys.path.insert(0, str(HERE.parent))  # tests/: the hosts' network and cluster
    import shutil

    from tests.integration.host_network import HostNetwork, unavailable
    from tests.integration.hosts_cluster import Processes, shm_root, start_hosts_cluster

    why = unavailable()
    if why:
        raise SystemExit(f"--netns: {why}")
    net = HostNetwork()
    processes = Processes(state)
    try:
        net.create(HOSTS)
        master, s3 = start_hosts_cluster(
            net, processes, state, dict.fromkeys(HOSTS, "zone"), capacity="1GiB"
        )
        if cap_mbit:
            for host in HOSTS:
                net.cap(host, cap_mbit)
        log(f"hosts {HOSTS} in network namespaces, links capped at {cap_mbit or '-'} Mbit/s")
        yield _HostsCluster(master, s3)
    finally:
        processes.stop_all()
        net.remove()
        shutil.rmtree(shm_root(net), ignore_errors=True)


def plot(summary: dict[str, dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.bar(names, [100 * summary[n]["local_fraction"] for n in names], color=["grey", "teal"])
    left.set_ylabel("% of bytes read on the rank's host")
    left.set_ylim(0, 100)
    right.bar(names, [summary[n]["epoch_seconds"] for n in names], color=["grey", "teal"])
    right.set_ylabel("epoch seconds (slowest rank, median)")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("One rank per host, 3 hosts, warm data set")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
