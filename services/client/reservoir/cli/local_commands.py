"""`reservoir local ...`: a whole cluster on this machine."""

from __future__ import annotations

import argparse
from pathlib import Path

from reservoir.common.config import parse_duration
from reservoir.local.process import ClusterError

from .output import Table, emit, note
from .subcommands import Subcommands


def cmd_local_up(args: argparse.Namespace) -> None:
    from reservoir.local.cluster import LocalCluster
    from reservoir.local.next_steps import next_steps, s3_env

    # A flag left out is None: the default for a new cluster, the recorded value on resume.
    cluster = LocalCluster.up(
        Path(args.state_dir),
        workers=args.workers,
        masters=args.masters,
        s3_endpoint=args.s3_endpoint or "",
        s3_latency_ms=args.s3_latency_ms,
        capacity=args.capacity,
        shm=args.shm,
        disk_capacity=args.disk_capacity,
        secure=args.secure,
        gateway=args.gateway,
        etcd_members=args.etcd_members,
        env=_environment(args.env),
        keep_s3_data=True,
        resume=args.resume,
    )
    emit(args, cluster.status() | {"s3_env": s3_env(cluster)}, lambda: cluster.master_address)
    if not args.json:
        note(next_steps(cluster))


def _environment(given: list[str] | None) -> dict[str, str] | None:
    """`--env KEY=VALUE` flags as a mapping; None when none was given (on resume: the
    recorded one)."""
    if not given:
        return None
    env: dict[str, str] = {}
    for item in given:
        key, equals, value = item.partition("=")
        if not equals or not key or any(c.isspace() for c in key):
            raise ValueError(f"--env takes KEY=VALUE, got {item!r}")
        env[key] = value
    return env


def cmd_local_down(args: argparse.Namespace) -> None:
    from reservoir.local.cluster import LocalCluster

    if not (Path(args.state_dir) / "cluster.json").exists():
        note("no local cluster running")
        return
    LocalCluster.load(Path(args.state_dir)).down()
    note("local cluster stopped (`reservoir local up --resume` starts it again with its mounts)")


def cmd_local_status(args: argparse.Namespace) -> None:
    from reservoir.local.cluster import LocalCluster
    from reservoir.local.next_steps import exports, s3_env

    cluster = LocalCluster.load(Path(args.state_dir))
    status = cluster.status() | {"s3_env": s3_env(cluster)}

    def text() -> str:
        table = Table(
            "PROCESS", "STATE", "PID", "PORT", "METRICS", "LOG", numeric=("PID", "PORT")
        )  # fmt: skip
        for name, p in status["processes"].items():
            state = "running" if p["alive"] else "DEAD"
            if p["alive"] and "role" in p and "," in status["master"]:
                state = f"running ({p['role']})"  # which of several masters leads
            if p["alive"] and "worker_state" in p:
                state = f"running ({p['worker_state']})"  # serving, draining, drained
            table.row(name, state, p["pid"], p["port"], p.get("metrics", "-"), p["log"])
        head = f"master {status['master']}   s3 {status['s3_endpoint']}"
        if status.get("gateway"):
            head += f"   gateway {status['gateway']}"
        return f"{head}   etcd {status['metadata_url']}\n{table.render()}"

    emit(args, status, text)
    if not args.json:
        note(f"# for boto3 and the aws CLI:\n{exports(cluster)}")
    dead = [name for name, p in status["processes"].items() if not p["alive"]]
    if dead:
        # The table is printed either way; the exit code is what a script or probe checks.
        raise ClusterError(
            f"not running: {', '.join(dead)} (`reservoir local restart NAME` starts one "
            "again; its log says why it stopped)"
        )


def cmd_local_restart(args: argparse.Namespace) -> None:
    from reservoir.local.cluster import LocalCluster

    cluster = LocalCluster.load(Path(args.state_dir))
    cluster.restart(args.name)
    proc = cluster.processes[args.name]
    note(f"restarted {args.name} (pid {proc.pid}, port {proc.port})")


def cmd_local_add_worker(args: argparse.Namespace) -> None:
    from reservoir.local.cluster import LocalCluster
    from reservoir.local.worker_changes import add_worker
    from reservoir.local.worker_roster import WorkerOptions

    cluster = LocalCluster.load(Path(args.state_dir))
    options = WorkerOptions(
        capacity=args.capacity, shm=args.shm, disk_capacity=args.disk_capacity, host=args.host
    )  # fmt: skip
    name = add_worker(cluster, options)
    proc = cluster.processes[name]
    emit(args, {"name": name, "pid": proc.pid, "port": proc.port}, lambda: name)
    note(
        f"{name} serves (pid {proc.pid}, port {proc.port}); the master fills it with its share "
        "of the cached blocks from the other workers"
    )


def cmd_local_remove_worker(args: argparse.Namespace) -> None:
    from reservoir.local.cluster import LocalCluster
    from reservoir.local.worker_changes import remove_worker

    if args.timeout and not args.drain:
        raise ValueError("--timeout is how long --drain may take: give --drain too")
    cluster = LocalCluster.load(Path(args.state_dir))
    remove_worker(
        cluster,
        args.name,
        drain=args.drain,
        drain_timeout_s=parse_duration(args.timeout) if args.timeout else None,
    )
    kept = "its blocks were copied to the other workers" if args.drain else "its cache is gone"
    note(f"removed {args.name} ({kept}); `reservoir local up --resume` leaves it out")


def cmd_local_demo(args: argparse.Namespace) -> None:
    from reservoir.local.demo import run_demo

    run_demo(Path(args.state_dir), files=args.files, json_output=args.json)


def register(commands: Subcommands) -> None:
    local = commands.group("local", "a whole cluster on this machine (etcd, S3, master, workers)")
    up = local.add("up", "start etcd, S3 (unless given), the master and workers", cmd_local_up)
    up.add_argument("--workers", type=int, metavar="N", help="how many workers (default 2)")
    up.add_argument(
        "--masters",
        type=int,
        metavar="N",
        help="how many masters (default 1); one leads, the others take over if it stops",
    )
    up.add_argument(
        "--s3-endpoint", metavar="URL", help="use this S3 endpoint instead of starting one"
    )
    up.add_argument(
        "--s3-latency-ms",
        type=float,
        metavar="MS",
        help="first-byte latency the local S3 server adds to every GET (default 0)",
    )
    up.add_argument(
        "--capacity",
        metavar="SIZE",
        help="cache capacity per worker (default 1GiB)",
    )
    up.add_argument(
        "--disk-capacity",
        metavar="SIZE",
        help="workers also keep blocks on disk, up to SIZE each, under the state dir "
        "(kept across worker restarts)",
    )
    up.add_argument(
        "--shm",
        action=argparse.BooleanOptionalAction,
        help="workers keep blocks in /dev/shm: same-host short-circuit reads (default: no)",
    )
    up.add_argument(
        "--secure",
        action=argparse.BooleanOptionalAction,
        help="TLS on every hop and tokens with roles: a local CA, certificates and one token "
        "per role in the state dir, recorded in cluster.json (default: no)",
    )
    up.add_argument(
        "--gateway",
        action=argparse.BooleanOptionalAction,
        help="also run an S3 gateway (`reservoir gateway`) in front of the cluster; its URL "
        "is `gateway` in cluster.json and `local status` (default: no)",
    )
    up.add_argument(
        "--etcd-members",
        type=int,
        metavar="N",
        help="run etcd as a cluster of N members (3 survives the loss of one), each on its "
        "own ports; the master and workers are given every member (default 1)",
    )
    up.add_argument(
        "--env",
        action="append",
        metavar="KEY=VALUE",
        help="a setting for every server, as an environment variable (repeatable), e.g. "
        "RESERVOIR_ALLOWED_SCHEMES=s3,gs,az; recorded in cluster.json, so `local restart`, "
        "`local add-worker` and --resume keep it (secrets belong in files: "
        "`mount --credentials file:PATH`)",
    )
    up.add_argument(
        "--resume",
        action="store_true",
        help="start the stopped cluster of --state-dir again, with its mounts, S3 data and "
        "settings: a flag left out is as the stopped cluster had it, one that differs is "
        "refused (default: a clean cluster, the stopped one's data wiped)",
    )
    local.add("down", "stop the local cluster (its data stays for --resume)", cmd_local_down)
    local.add(
        "status",
        "the local cluster's processes, ports, metrics URLs and logs (exit 1 if one is dead)",
        cmd_local_status,
    )
    restart = local.add(
        "restart",
        "start one process of the local cluster again (stopped first if it runs), with the "
        "same ports, settings and data",
        cmd_local_restart,
    )
    restart.add_argument(
        "name", metavar="NAME", help="the process, as `local status` names it: worker2, master…"
    )
    add = local.add(
        "add-worker",
        "start one more worker (the next workerN) and wait until it serves; `local up "
        "--resume` brings it back with its options",
        cmd_local_add_worker,
    )
    add.add_argument(
        "--capacity", metavar="SIZE", help="its cache capacity (default: the cluster's)"
    )
    add.add_argument(
        "--disk-capacity",
        metavar="SIZE",
        help="it also keeps blocks on disk, up to SIZE (default: as the cluster's workers)",
    )
    add.add_argument(
        "--shm",
        action=argparse.BooleanOptionalAction,
        help="it keeps blocks in /dev/shm for short-circuit reads (default: the cluster's)",
    )
    add.add_argument(
        "--host",
        metavar="ID",
        help="the host id it reports (RESERVOIR_HOST), to stand for a machine of its own in "
        "locality tests (default: this machine's host name)",
    )
    remove = local.add(
        "remove-worker",
        "stop a worker and take it out of the cluster (`local up --resume` leaves it out); "
        "with --drain its blocks are first copied to the other workers",
        cmd_local_remove_worker,
    )
    remove.add_argument("name", metavar="NAME", help="the worker, as `local status` names it")
    remove.add_argument(
        "--drain",
        action="store_true",
        help="drain it through the master first (`reservoir drain NAME --wait`); if the "
        "drain fails or times out the worker is left running and the command fails",
    )
    remove.add_argument(
        "--timeout",
        metavar="DURATION",
        help="with --drain: how long the drain may take (e.g. 5m; default: until it ends)",
    )
    demo = local.add(
        "demo", "write a sample data set to the local S3, mount it, read it twice", cmd_local_demo
    )
    demo.add_argument(
        "--files", type=int, default=400, help="how many files the data set has (default 400)"
    )
