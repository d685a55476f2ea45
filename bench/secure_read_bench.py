"""Warm reads on a secure cluster at each data protection level against the same reads on
a default cluster, beside the machine's ceilings: issue #35's secure rows.

    python bench/secure_read_bench.py            # 2,000 files of 8-40 KB, 8 x 32 MiB, 3 runs
    python bench/secure_read_bench.py --quick    # smoke run: tiny data sets, one run
    python bench/secure_read_bench.py --levels integrity --pin   # one level; reader on
                                  # core 0, the clusters on core 1: hosts of their own

Starts local clusters of the same shape side by side (moto S3, --workers workers with
/dev/shm block files): a default one and `--secure` ones (TLS on every hop, tokens, the
credentials made by `reservoir.local.pki`) whose data ports run at `privacy` (a TLS handshake, then AES-GCM records),
`integrity` (clear, every response sealed with a keyed GMAC) and `authentication` (clear,
a token proof only): RESERVOIR_DATA_PROTECTION. Uploads the same data sets to each, reads
them once through the workers (untimed), then measures warm `Client.read` per file on
--concurrency threads, mode after mode in an order that turns each run so a noisy moment
hits all. Clients read as a remote host would (no short-circuit): block bytes come over
the workers' data ports. Beside them, the ceilings of this machine, measured in the same
run: AES-128-GCM on one core (`openssl speed`), one Python `ssl` stream over loopback
with large `recv_into` (what a TLS data port could reach), one plain loopback stream, and
the `integrity` tag over blocks from memory: with default's CPU per MiB, they give the
most each level can reach while reader and workers share the cores (`cpu_bound`).
Prints a table of medians (files/s, MB/s) and each level ÷ default against the issue's
targets, with the CPU the reader and the workers spent per MiB (large) or per file
(small), from /proc/<pid>/stat and the reader's process time; writes --json and --png.
With --pin, the reader runs on one core and every cluster process on another, as on a
machine of its own: a level's cost on the reader and on the workers then shows apart,
instead of as one share of two cores. See bench/README.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed import readers  # noqa: E402 - bench/ is not a package
from speed.datasets import BUCKET, MOUNT, Dataset, large_dataset, small_dataset, upload  # noqa: E402
from speed.results import MiB, log, machine_info  # noqa: E402
from speed.s3_servers import cpu_seconds  # noqa: E402

HERE = Path(__file__).resolve().parent
MODES = ("default", "privacy", "integrity", "authentication")
# Issue #35's targets: level ÷ default, warm, `read` per file.
TARGETS = {
    ("privacy", "small"): ("files_s", 0.8),
    ("privacy", "large"): ("mb_s", 0.5),
    ("integrity", "small"): ("files_s", 0.9),
    ("integrity", "large"): ("mb_s", 0.9),
    ("authentication", "small"): ("files_s", 0.9),
    ("authentication", "large"): ("mb_s", 0.9),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--capacity", default="2GiB", help="cache capacity per worker")
    p.add_argument("--small-files", type=int, default=2_000, help="files of 8-40 KB")
    p.add_argument("--large-files", type=int, default=8)
    p.add_argument("--large-file-mb", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=16, help="reader threads")
    p.add_argument("--runs", type=int, default=3, help="runs of each mode, alternating")
    p.add_argument("--json", type=Path, default=HERE / "results" / "secure_read_bench.json")
    p.add_argument("--png", type=Path, default=HERE / "results" / "secure_read_bench.png")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one run: a smoke test")
    p.add_argument(
        "--pin",
        action="store_true",
        help="the reader on core 0, every cluster process on core 1 (hosts of their own)",
    )
    p.add_argument(
        "--levels",
        default=",".join(MODES[1:]),
        help="levels measured beside default, comma-separated (an A/B of one: --levels integrity)",
    )
    args = p.parse_args(argv)
    levels = [level.strip() for level in args.levels.split(",") if level.strip()]
    if not levels or set(levels) - set(MODES[1:]):
        p.error(f"--levels: some of {', '.join(MODES[1:])}")
    args.modes = ("default", *(mode for mode in MODES[1:] if mode in levels))
    if args.quick:
        args.small_files, args.large_files, args.large_file_mb, args.runs = 100, 2, 4, 1
    return args


def start(mode: str, root: Path, args: argparse.Namespace) -> Any:
    from reservoir.local import pki
    from reservoir.local.cluster import LocalCluster

    secure = mode != "default"
    credentials = None
    if secure:
        names = [f"worker{n}" for n in range(1, args.workers + 1)]
        credentials = pki.create(root / "pki", names).directory
    log(f"starting the {mode} cluster ({args.workers} workers)")
    return LocalCluster.up(
        root / "state",
        workers=args.workers,
        capacity=args.capacity,
        shm=True,
        secure=secure,
        credentials=credentials,
        env={"RESERVOIR_DATA_PROTECTION": mode} if secure else None,
    )


def client(cluster: Any, data_port: bool = True) -> Any:
    from reservoir.client import Client

    # A remote reader: no same-host files, so every block comes over a data port.
    config = cluster.client_config("reader", short_circuit=False, data_port=data_port)
    return Client(config=config)


def prepare(cluster: Any, datasets: list[Dataset], args: argparse.Namespace) -> None:
    """Uploads, mounts and reads every data set once (untimed): the workers hold it all."""
    from reservoir.client import Client

    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=BUCKET)
    for ds in datasets:
        upload(s3, ds, [ds.prefix], 16, args.seed)
    with Client(config=cluster.client_config("admin")) as admin:
        admin.mount(MOUNT, f"s3://{BUCKET}/", endpoint_url=cluster.s3_endpoint)
    with client(cluster) as c, cf.ThreadPoolExecutor(args.concurrency) as pool:
        for ds in datasets:
            read = readers.reservoir_read(c, ds, pool)()
            if read.wrong:
                raise RuntimeError(f"warm-up of {ds.name}: bytes differ: {read.wrong[:3]}")


def measure(
    cluster: Any, ds: Dataset, args: argparse.Namespace, data_port: bool = True
) -> dict[str, float]:
    workers = [cluster.processes[name].pid for name in cluster.worker_names()]
    with client(cluster, data_port) as c, cf.ThreadPoolExecutor(args.concurrency) as pool:
        read = readers.reservoir_read(c, ds, pool)
        read()  # this client's connections opened (as a training job's would be)
        workers_before, reader_before = sum(map(cpu_seconds, workers)), time.process_time()
        got = read()
        reader_cpu = time.process_time() - reader_before
        workers_cpu = sum(map(cpu_seconds, workers)) - workers_before
        if got.wrong or got.files != len(ds.sizes):
            raise RuntimeError(f"{ds.name}: {got.files} files, wrong: {got.wrong[:3]}")
        over_data_ports = c.aio.data_port_bytes
    # Both reads' bytes over the data ports (or none, asked not to): the row is what it says.
    if over_data_ports != (2 * got.nbytes if data_port else 0):
        raise RuntimeError(f"{ds.name}: {over_data_ports:,} bytes over data ports")
    return {
        "seconds": got.seconds,
        "files_s": got.files / got.seconds,
        "mb_s": got.nbytes / MiB / got.seconds,
        "data_port_bytes": over_data_ports,
        # CPU per MiB (ms) and per file (us): the reader (this process) and all workers.
        "reader_ms_mib": reader_cpu * 1e3 / (got.nbytes / MiB),
        "workers_ms_mib": workers_cpu * 1e3 / (got.nbytes / MiB),
        "reader_us_file": reader_cpu * 1e6 / got.files,
        "workers_us_file": workers_cpu * 1e6 / got.files,
    }


def pin(clusters: dict[str, Any]) -> None:
    """The reader (this process) on core 0; every cluster process, its threads and its
    children on core 1."""
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("--pin needs two cores")
    for cluster in clusters.values():
        for proc in cluster.processes.values():
            _pin_tree(proc.pid, {1})
    os.sched_setaffinity(0, {0})


def _pin_tree(pid: int, cpus: set[int]) -> None:
    tasks = Path(f"/proc/{pid}/task")
    for task in tasks.iterdir() if tasks.exists() else ():
        try:
            os.sched_setaffinity(int(task.name), cpus)
            children = (task / "children").read_text().split()
        except OSError:
            continue  # gone meanwhile
        for child in children:
            _pin_tree(int(child), cpus)


AES_CEILING = "AES-128-GCM, openssl speed, 16 KiB blocks"
GMAC_CEILING = "integrity's tag (GMAC) of 4 MiB blocks from memory"
# The passes over each byte a level adds to default's, whose worker sends a block file by
# `sendfile` without reading it and whose reader takes the block's CRC32C: at `privacy`
# the worker seals each byte with AES-GCM and the reader opens it (counted at AES-128's
# speed: generous, the records are AES-256); at `integrity` both take the tag, and the
# CRC32C moves from the reader to the worker.
ADDED_PASSES = {"privacy": (AES_CEILING, AES_CEILING), "integrity": (GMAC_CEILING, GMAC_CEILING)}


def cpu_bound(level: str, default: dict[str, float], ceilings: dict[str, float]) -> float:
    """The most `level ÷ default` for large files can be when both are bound by the CPU
    of the same cores (reader and workers on one machine): default's CPU per MiB, plus
    the level's added passes at this machine's speeds. Copies, system calls and Python
    cost nothing in this bound."""
    default_ms = default["reader_ms_mib"] + default["workers_ms_mib"]
    extra_ms = sum(1e3 / ceilings[name] for name in ADDED_PASSES[level])
    return default_ms / (default_ms + extra_ms)


CPU_KEYS = (
    "files_s",
    "mb_s",
    "seconds",
    "reader_ms_mib",
    "workers_ms_mib",
    "reader_us_file",
    "workers_us_file",
)


def _cpu(default: dict[str, float], level: dict[str, float], metric: str, who: str) -> str:
    key, unit = (f"{who}_ms_mib", "ms/MiB") if metric == "mb_s" else (f"{who}_us_file", "us/file")
    digits = 2 if unit == "ms/MiB" else 0
    return f"{default[key]:.{digits}f} → {level[key]:.{digits}f} {unit}"


def table(
    medians: dict[str, dict[str, dict[str, float]]],
    paired: dict[tuple[str, str], float],
    ceilings: dict[str, float],
) -> tuple[str, list[dict[str, Any]]]:
    lines = [
        "| level | data set | default | this level | level ÷ default | target "
        "| paired runs' ratios (median) | reader CPU, default → level "
        "| workers' CPU, default → level |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for (mode, name), (metric, target) in TARGETS.items():
        if mode not in medians:
            continue
        default, level = medians["default"][name], medians[mode][name]
        ratio = level[metric] / default[metric]
        unit = "files/s" if metric == "files_s" else "MB/s"
        met = "met" if ratio >= target else "not met"
        lines.append(
            f"| {mode} | {name}, `read` per file | {default[metric]:,.0f} {unit} "
            f"| {level[metric]:,.0f} {unit} | {ratio:.2f} | ≥ {target} ({met}) "
            f"| {paired[(mode, name)]:.2f} | {_cpu(default, level, metric, 'reader')} "
            f"| {_cpu(default, level, metric, 'workers')} |"
        )
        verdicts.append(
            {
                "level": mode,
                "dataset": name,
                "metric": metric,
                "ratio": ratio,
                "paired_ratio": paired[(mode, name)],
                "target": target,
                "met": met,
            }
        )
    default_large = medians["default"]["large"]
    bounds = {
        level: cpu_bound(level, default_large, ceilings)
        for level in ADDED_PASSES
        if level in medians
    }
    for verdict in verdicts:
        if verdict["dataset"] == "large" and verdict["level"] in bounds:
            verdict["cpu_bound"] = bounds[verdict["level"]]
    if bounds:
        lines.append("")
        lines.append(
            "The most level ÷ default can be for large files while reader and workers share "
            "these cores (default's CPU per MiB plus the passes the level adds, at the "
            "speeds below): " + ", ".join(f"{level} {b:.2f}" for level, b in bounds.items())
        )
    lines.append("")
    lines.append("| ceiling of this machine (one core, one stream) | MB/s |")
    lines.append("|---|---|")
    for what, mb_s in ceilings.items():
        lines.append(f"| {what} | {mb_s:,.0f} |")
    return "\n".join(lines), verdicts


def _openssl_gcm_mb_s() -> float:
    """`openssl speed` of AES-128-GCM on 16 KiB blocks, one core."""
    import subprocess

    done = subprocess.run(
        ["openssl", "speed", "-elapsed", "-seconds", "2", "-evp", "aes-128-gcm"],
        capture_output=True,
        text=True,
        check=True,
    )
    row = [line for line in done.stdout.splitlines() if line.startswith("AES-128-GCM")][-1]
    return float(row.split()[-1].rstrip("k")) * 1000 / MiB


def _loopback_mb_s(context_pair: tuple[Any, Any] | None, total: int = 512 * MiB) -> float:
    """One stream over loopback TCP, sent in 4 MiB writes and taken with `recv_into` of
    4 MiB: plain, or TLS with the contexts given (server, client)."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    chunk = os.urandom(4 * MiB)

    def serve() -> None:
        conn, _ = listener.accept()
        if context_pair is not None:
            conn = context_pair[0].wrap_socket(conn, server_side=True)
        for _ in range(total // len(chunk)):
            conn.sendall(chunk)
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    sock = socket.create_connection(("127.0.0.1", port))
    if context_pair is not None:
        sock = context_pair[1].wrap_socket(sock, server_hostname="localhost")
    buffer = memoryview(bytearray(4 * MiB))
    got, started = 0, time.perf_counter()
    while got < total:
        n = sock.recv_into(buffer)
        if n == 0:
            break
        got += n
    seconds = time.perf_counter() - started
    sock.close()
    thread.join()
    listener.close()
    return got / MiB / seconds


def _gmac_mb_s(total: int = 256 * MiB) -> float:
    """The `integrity` tag as worker and reader take it (`ResponseSeal`), over 4 MiB
    blocks in memory but in no CPU cache (64 of them in turn), one core, by process time."""
    from reservoir.common.blocks.data_protection import ResponseSeal

    blocks = [os.urandom(4 * MiB) for _ in range(64)]
    seal = ResponseSeal(os.urandom(16))
    seal.tag(b"request", b"header", blocks[0])  # the first call's imports
    started = time.process_time()
    for n in range(total // (4 * MiB)):
        seal.tag(b"request", b"header", blocks[n % len(blocks)])
    return total / MiB / (time.process_time() - started)


def measure_ceilings(root: Path) -> dict[str, float]:
    import ssl

    from reservoir.local import pki

    creds = pki.create(root / "ceiling-pki", ["localhost"])
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(creds.cert), str(creds.key))
    client_context = ssl.create_default_context(cafile=str(creds.ca))
    client_context.check_hostname = False
    log("measuring the machine's ceilings")
    return {
        AES_CEILING: _openssl_gcm_mb_s(),
        "Python ssl over loopback, recv_into 4 MiB": _loopback_mb_s((server, client_context)),
        "plain TCP over loopback, recv_into 4 MiB": _loopback_mb_s(None),
        GMAC_CEILING: _gmac_mb_s(),
    }


def draw(verdicts: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 2.6))
    fig.set_size_inches(8, 0.5 * len(verdicts) + 1.2)
    for y, v in enumerate(reversed(verdicts)):
        ax.barh(y, v["ratio"], color="#2e7d32" if v["met"] == "met" else "#c62828", height=0.6)
        ax.plot([v["target"]] * 2, [y - 0.4, y + 0.4], color="black", linewidth=2)
        if "cpu_bound" in v:  # the most these cores allow (cpu_bound)
            ax.plot([v["cpu_bound"]] * 2, [y - 0.4, y + 0.4], color="grey", linestyle="--")
        label_at = max(v["ratio"], v.get("cpu_bound", 0.0)) + 0.01
        ax.text(label_at, y, f"{v['ratio']:.2f}", va="center", fontsize=9)
    ax.set_yticks(range(len(verdicts)))
    ax.set_yticklabels(
        [f"{v['level']}, {v['dataset']} ({v['metric']})" for v in reversed(verdicts)]
    )
    ax.set_xlim(0, 1.3)
    ax.set_xlabel(
        "level ÷ default (bar), the target (black line), the most these cores allow (dashed)"
    )
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from reservoir.local.cluster import DEV_CREDENTIALS

    for key, value in DEV_CREDENTIALS.items():
        os.environ.setdefault(key, value)
    started = time.perf_counter()
    info = machine_info()
    rng = random.Random(args.seed)
    datasets = [
        small_dataset(args.small_files, rng),
        large_dataset(args.large_files, args.large_file_mb, rng),
    ]
    work = Path(tempfile.mkdtemp(prefix="reservoir-secure-bench-"))
    clusters: dict[str, Any] = {}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        mode: {ds.name: [] for ds in datasets} for mode in args.modes
    }
    try:
        ceilings = measure_ceilings(work)
        for mode in args.modes:
            clusters[mode] = start(mode, work / mode, args)
            prepare(clusters[mode], datasets, args)
        if args.pin:
            pin(clusters)
        for run in range(args.runs):
            for ds in datasets:
                # The order turns each run: no mode always has the quiet moment.
                turn = run % len(args.modes)
                for mode in args.modes[turn:] + args.modes[:turn]:
                    got = measure(clusters[mode], ds, args)
                    runs[mode][ds.name].append(got)
                    log(
                        f"  run {run + 1} {mode:<14} {ds.name:<5} {got['files_s']:8.0f} files/s "
                        f"{got['mb_s']:8.1f} MB/s  over data ports: {got['data_port_bytes']:,} B"
                    )
    finally:
        for cluster in clusters.values():
            cluster.down()
        shutil.rmtree(work, ignore_errors=True)
    medians = {
        mode: {
            name: {key: statistics.median(r[key] for r in results) for key in CPU_KEYS}
            for name, results in by_set.items()
        }
        for mode, by_set in runs.items()
    }
    # Each run's secure ÷ default (the two measured back to back), then their median: a
    # noisy minute moves both halves of a pair alike.
    paired = {
        (mode, name): statistics.median(
            s[metric] / d[metric]
            for s, d in zip(runs[mode][name], runs["default"][name], strict=True)
        )
        for (mode, name), (metric, _) in TARGETS.items()
        if mode in args.modes
    }
    text, verdicts = table(medians, paired, ceilings)
    wall = time.perf_counter() - started
    print(
        f"each data protection level ÷ default, warm `read` per file, {args.concurrency} "
        f"threads, {args.workers} workers, medians of {args.runs} runs ({wall / 60:.1f} min)"
        + (", reader on core 0, clusters on core 1" if args.pin else "")
    )
    print(text)
    info["loadavg_end"] = os.getloadavg()
    result = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": info,
        "wall_seconds": wall,
        "datasets": {ds.name: {"files": len(ds.sizes), "bytes": ds.nbytes} for ds in datasets},
        "medians": medians,
        "ceilings_mb_s": ceilings,
        "targets": verdicts,
        "runs": runs,
        "table": text,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    draw(
        verdicts,
        args.png,
        f"level ÷ default warm reads, medians of {args.runs} runs, {info['nproc']} cores"
        + (" (reader pinned apart)" if args.pin else "")
        + f", {time.strftime('%Y-%m-%d')}",
    )
    log(f"wrote {args.json} and {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
