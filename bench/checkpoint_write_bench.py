"""Checkpoints through the cache (issues 21 and 31's targets): save, load right after, DCP.

    pip install -e '.[bench]'                               # once: SeaweedFS, s3torchconnector
    python bench/checkpoint_write_bench.py                  # 2 GiB file, 64 x 32 MiB, 1 GiB DCP
    python bench/checkpoint_write_bench.py --size-mb 1024 --dcp-mb 256 --save-runs 3
    python bench/checkpoint_write_bench.py --s3 moto        # the tests' S3 server instead
    python bench/checkpoint_write_bench.py --no-dcp --no-fuse --shards 0   # the file saves only

Starts a local cluster (etcd, an S3 server: SeaweedFS behind the bench's counting relay,
or moto; the master, --workers workers of --capacity each, blocks in /dev/shm so a reader
on the workers' host reads them directly) and mounts a bucket --writable, and (unless
--no-fuse) `reservoir fuse --writable` over it. moto spends a lot of CPU per byte in one
Python process, so on a small machine it measures moto; SeaweedFS is the default, as in
read_bench.py. Then, all against that one S3 server, in the same run:

  save           --size-mb MiB of random bytes saved as one object by every writer of
                 speed/checkpoint_savers.py, in 16 MiB writes: Reservoir's SDK
                 (`Client.open(path, "wb")`, open to the end of close), FUSE `torch.save` to
                 a path on the writable mount, boto3 `upload_fileobj` (default TransferConfig
                 and tuned: 32 MiB parts, 16 threads), s3fs `open("wb")`, s3torchconnector's
                 `S3Checkpoint` writer; --save-runs rounds, the writers' order rotated each
                 round, medians reported. Client CPU per GiB: this process's utime + stime
                 over the save (every writer runs in it), plus the FUSE serving process's
  shards         --shards objects of --shard-mb MiB each (64 x 32 MiB), 8 written at once,
                 by the same writers (FUSE: plain `open("wb")` writes)
  load           right after the SDK's save, --readers processes at once each read the
                 whole file with `readinto` a 16 MiB buffer (`Client.open(path, "rb")`); MB/s
                 per process (mean), and the S3 GETs the cluster made meanwhile (target 0) |
                 the same processes, each one boto3 `get_object` read into 16 MiB pieces
  gateway save   (--gateway) boto3 `upload_fileobj` of the same bytes through `reservoir
                 gateway` into the writable mount | boto3 `upload_fileobj` to S3 directly
  DCP save/load  `torch.distributed.checkpoint` save and load of a state dict of
                 --dcp-mb MiB (float32 tensors of 64 MiB) with FsspecWriter/FsspecReader on
                 reservoir:// | the same through s3fs on s3://

Every load is checked byte for byte (CRC32C) against what was written, every save's size
where it landed. Prints the targets table (value, baseline, ratio, target, verdict), and
writes --json and --png.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
import crc32c

from reservoir.client import Client
from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed import checkpoint_savers as savers  # noqa: E402
from speed.s3_servers import S3Choice, cpu_seconds  # noqa: E402
from speed.shm_flags import add_shm_arguments, shm_env  # noqa: E402

MiB = 1 << 20
BUCKET = "ckpt-bench"
PIECE = 16 * MiB


def _payload(size: int) -> bytes:
    # Random bytes: nothing on the way can compress or deduplicate them.
    return os.urandom(size)


def save_gateway(cluster: LocalCluster, key: str, data: bytes) -> float:
    """boto3 `upload_fileobj` (default transfer settings: 8 MiB parts, 10 threads) through
    `reservoir gateway` into the writable mount: its parts are spooled by the gateway and
    written through on Complete, so the object is published whole."""
    s3 = boto3.client(
        "s3",
        endpoint_url=cluster.gateway_url,
        aws_access_key_id="any",
        aws_secret_access_key="any",
        region_name="us-east-1",
    )
    start = time.perf_counter()
    s3.upload_fileobj(io.BytesIO(data), "bench", key)
    seconds = time.perf_counter() - start
    if s3.head_object(Bucket="bench", Key=key)["ContentLength"] != len(data):
        raise SystemExit(f"the gateway's {key} is not the {len(data)} bytes uploaded")
    return seconds


def _read_reservoir(master: str, path: str, barrier: Any, out: Any) -> None:
    buffer = bytearray(PIECE)
    view = memoryview(buffer)
    crc = total = 0
    with Client(master) as rs:
        rs.stat(path)
        barrier.wait()
        start = time.perf_counter()
        with rs.open(path, "rb", buffering=0) as f:
            while n := f.readinto(view):
                crc = crc32c.crc32c(view[:n], crc)
                total += n
        out.put((time.perf_counter() - start, total, crc))


def _read_boto3(endpoint: str, key: str, barrier: Any, out: Any) -> None:
    s3 = boto3.client("s3", endpoint_url=endpoint)
    crc = total = 0
    barrier.wait()
    start = time.perf_counter()
    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"]
    # botocore's body has no readinto: 16 MiB reads, each a new buffer.
    while piece := body.read(PIECE):
        crc = crc32c.crc32c(piece, crc)
        total += len(piece)
    out.put((time.perf_counter() - start, total, crc))


def load_in_processes(
    target: Any, args: tuple[Any, ...], readers: int
) -> list[tuple[float, int, int]]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(readers), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, out)) for _ in range(readers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    return results


def _state(mb: int) -> dict[str, Any]:
    import torch

    count = max(1, mb // 64)
    return {f"layer{i}.weight": torch.randn(16 * MiB) for i in range(count)}


def dcp_round_trip(url: str, state: dict[str, Any], **options: Any) -> tuple[float, float]:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

    start = time.perf_counter()
    dcp.save(state, storage_writer=FsspecWriter(url, **options))
    saved = time.perf_counter() - start
    target = {k: torch.empty_like(v) for k, v in state.items()}
    start = time.perf_counter()
    dcp.load(target, storage_reader=FsspecReader(url, **options))
    loaded = time.perf_counter() - start
    for name, tensor in state.items():
        if not torch.equal(tensor, target[name]):
            raise SystemExit(f"DCP load through {url}: {name} differs")
    return saved, loaded


def _row(
    metric: str,
    value: float,
    baseline: float,
    target: float,
    note: str = "",
    *,
    lower_is_better: bool = False,
) -> dict[str, Any]:
    """A target row: `value / baseline` against `target` (at most it, when lower is
    better, as for CPU); a `target` of 0 is informative."""
    ratio = value / baseline if baseline else 0.0
    if not target:
        verdict = "informative"
    elif (ratio <= target) if lower_is_better else (ratio >= target):
        verdict = "met"
    else:
        verdict = "not met"
    return {
        "metric": metric,
        "value": round(value, 2 if value < 10 else 1),
        "baseline": round(baseline, 2 if baseline < 10 else 1),
        "ratio": round(ratio, 2),
        "target": "-" if not target else f"<= {target}" if lower_is_better else target,
        "verdict": verdict + (f" ({note})" if note else ""),
    }


class FuseMount:
    """`reservoir fuse --writable` over the bench's mount, in the background: the serving
    process's pid, for its CPU (a FUSE save's client work is done there)."""

    def __init__(self, master: str, tmp: Path) -> None:
        self.root = tmp / "mnt"
        self.root.mkdir()
        self._run_dir = tmp / "fuse-run"
        self._env = {**os.environ, "RESERVOIR_FUSE_RUN_DIR": str(self._run_dir)}
        self._cli = [sys.executable, "-m", "reservoir.cli.main", "--master", master, "fuse"]

    def start(self) -> None:
        if not os.path.exists("/dev/fuse"):
            raise savers.Unavailable("no /dev/fuse on this machine")
        started = subprocess.run(
            [*self._cli, "-d", str(self.root), "--path", "/bench", "--writable"],
            env=self._env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if started.returncode != 0:
            raise savers.Unavailable(f"reservoir fuse failed: {started.stderr.strip()[-300:]}")

    def server_pid(self) -> int:
        for record in self._run_dir.glob("*.json"):
            pid = int(json.loads(record.read_text()).get("server_pid", 0))
            if pid:
                return pid
        return 0

    def stop(self) -> None:
        subprocess.run(
            [*self._cli, "--unmount", str(self.root)], env=self._env, check=False, timeout=60
        )


# Writer names, as rows and the plot show them.
SDK = "reservoir SDK open(wb)"
FUSE = "reservoir FUSE"  # torch.save of the file, plain writes of the shards
BOTO3 = "boto3 upload_fileobj"
BOTO3_TUNED = "boto3 upload_fileobj tuned"
S3FS = "s3fs open(wb)"
S3TORCH = "s3torchconnector S3Checkpoint"


def _writers(
    cluster: LocalCluster, rs: Client, fuse: FuseMount | None, unavailable: dict[str, str]
) -> dict[str, tuple[savers.Save, savers.Save]]:
    """Each writer's save of one file and of one shard; those that cannot run here are
    left out, their reason in `unavailable`."""
    s3 = cluster.s3_client()
    key, secret = DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"], DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    endpoint = cluster.s3_endpoint
    sdk = savers.reservoir_sdk(rs, "/bench/sdk")
    found: dict[str, tuple[savers.Save, savers.Save]] = {
        SDK: (sdk, sdk),
        BOTO3: (b := savers.boto3_upload(s3, BUCKET, "boto3", tuned=False), b),
        BOTO3_TUNED: (t := savers.boto3_upload(s3, BUCKET, "boto3-tuned", tuned=True), t),
        S3FS: (f := savers.s3fs_open(endpoint, key, secret, BUCKET, "s3fs"), f),
    }
    try:
        torch_writer = savers.s3torchconnector_checkpoint(endpoint, BUCKET, "s3torch")
        torch_writer("probe.bin", memoryview(b"probe"))  # a custom endpoint may be refused
        found[S3TORCH] = (torch_writer, torch_writer)
    except Exception as exc:  # noqa: BLE001 - any failure is the reason it is left out
        unavailable[S3TORCH] = f"{type(exc).__name__}: {exc}"[:300]
    if fuse is not None:
        found[FUSE] = (savers.fuse_torch_save(fuse.root), savers.fuse_write(fuse.root))
    return found


def _size_where_saved(cluster: LocalCluster, rs: Client, writer: str, name: str) -> int:
    if writer == SDK:
        return rs.stat(f"/bench/sdk/{name}").size
    if writer == FUSE:
        return rs.stat(f"/bench/{name}").size
    prefix = {BOTO3: "boto3", BOTO3_TUNED: "boto3-tuned", S3FS: "s3fs", S3TORCH: "s3torch"}
    head = cluster.s3_client().head_object(Bucket=BUCKET, Key=f"{prefix[writer]}/{name}")
    return int(head["ContentLength"])


def measure_saves(
    cluster: LocalCluster,
    s3: S3Choice,
    args: argparse.Namespace,
    data: bytes,
    fuse: FuseMount | None,
) -> dict[str, Any]:
    """Every writer's saves, --save-runs rounds in rotated order: per writer and kind
    ("file", "shards") the seconds and client CPU seconds of each round."""
    view = memoryview(data)
    shard_size = args.shard_mb * MiB
    unavailable: dict[str, str] = {}
    meter = CpuMeter(cluster, s3)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with Client(cluster.master_address) as rs:
        writers = _writers(cluster, rs, fuse, unavailable)
        for writer, reason in unavailable.items():
            print(f"{writer}: not measured: {reason}", file=sys.stderr)
        names = list(writers)
        kinds = ["file"] + (["shards"] if args.shards else [])
        for turn in range(args.save_runs):
            order = names[turn % len(names) :] + names[: turn % len(names)]
            for kind in kinds:
                for writer in order:
                    save_file, save_shard = writers[writer]
                    extra = [fuse.server_pid()] if writer == FUSE and fuse is not None else []
                    before, extra_before = meter.now(), sum(map(cpu_seconds, extra))
                    start = time.perf_counter()
                    if kind == "file":
                        name = "file.pt" if writer == FUSE else "file.bin"
                        save_file(name, view)
                    else:
                        savers.save_shards(save_shard, "shards", view, args.shards, shard_size)
                    seconds = time.perf_counter() - start
                    spent = meter.spent(before, meter.now())
                    spent["client"] = round(
                        spent["client"] + sum(map(cpu_seconds, extra)) - extra_before, 2
                    )
                    saved = args.size_mb * MiB if kind == "file" else args.shards * shard_size
                    check = "file.pt" if kind == "file" and writer == FUSE else "file.bin"
                    if kind == "shards":
                        check = f"shards/shard-{args.shards - 1:03d}"
                    landed = _size_where_saved(cluster, rs, writer, check)
                    expected = saved if kind == "file" else shard_size
                    if landed < expected or (writer != FUSE and landed != expected):
                        raise SystemExit(f"{writer} {kind}: {check} is {landed} bytes")
                    runs.setdefault(writer, {}).setdefault(kind, []).append(
                        {"seconds": round(seconds, 2), "cpu_s": spent}
                    )
                    print(
                        f"round {turn + 1}/{args.save_runs} {kind}: {writer} "
                        f"{saved / MiB / seconds:.0f} MB/s ({seconds:.1f} s), CPU s {spent}",
                        file=sys.stderr,
                    )
    return {"runs": runs, "unavailable": unavailable}


def _median_rate(runs: list[dict[str, Any]], mb: float) -> float:
    return statistics.median(mb / r["seconds"] for r in runs)


def _cpu_per_gib(runs: list[dict[str, Any]], mb: float) -> float:
    return statistics.median(r["cpu_s"]["client"] for r in runs) / (mb / 1024)


def save_rows(saves: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Issue 31's save targets (and the other writers, informative) from the medians."""
    runs, unavailable = saves["runs"], saves["unavailable"]
    rows: list[dict[str, Any]] = []
    sizes = {"file": float(args.size_mb), "shards": float(args.shards * args.shard_mb)}
    labels = {
        "file": f"save {args.size_mb} MiB",
        "shards": f"save {args.shards} x {args.shard_mb} MiB",
    }
    note = f"median of {args.save_runs}" if args.save_runs > 1 else ""
    targets = {BOTO3: 1.0, S3TORCH: 1.0}
    for kind in sizes:
        if SDK not in runs or kind not in runs[SDK]:
            continue
        mine = _median_rate(runs[SDK][kind], sizes[kind])
        for other in (BOTO3, BOTO3_TUNED, S3FS, S3TORCH):
            label = f"{labels[kind]}, MB/s: SDK / {other}"
            if other in unavailable:
                rows.append({"metric": label, "verdict": f"not measured: {unavailable[other]}"})
                continue
            target = targets.get(other, 0.0) if kind == "file" else 0.0
            theirs = _median_rate(runs[other][kind], sizes[kind])
            rows.append(_row(label, mine, theirs, target, note))
        rows.append(
            _row(
                f"{labels[kind]}, client CPU s/GiB: SDK / boto3",
                _cpu_per_gib(runs[SDK][kind], sizes[kind]),
                _cpu_per_gib(runs[BOTO3][kind], sizes[kind]),
                0.5 if kind == "file" else 0.0,
                note,
                lower_is_better=True,
            )
        )
        if FUSE in runs:
            what = "torch.save" if kind == "file" else "write"
            rows.append(
                _row(
                    f"{labels[kind]}, MB/s: FUSE {what} / SDK",
                    _median_rate(runs[FUSE][kind], sizes[kind]),
                    mine,
                    0.8 if kind == "file" else 0.0,
                    note,
                )
            )
        elif FUSE in unavailable:
            rows.append({"metric": f"{labels[kind]}: FUSE", "verdict": unavailable[FUSE]})
    return rows


def save_table(saves: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every writer's medians: MB/s and client CPU s per GiB, for the file and the shards."""
    table = []
    sizes = {"file": float(args.size_mb), "shards": float(args.shards * args.shard_mb)}
    for writer, kinds in saves["runs"].items():
        for kind, runs in kinds.items():
            table.append(
                {
                    "writer": writer,
                    "kind": kind,
                    "mb_s": round(_median_rate(runs, sizes[kind]), 1),
                    "min_mb_s": round(min(sizes[kind] / r["seconds"] for r in runs), 1),
                    "max_mb_s": round(max(sizes[kind] / r["seconds"] for r in runs), 1),
                    "client_cpu_s_per_gib": round(_cpu_per_gib(runs, sizes[kind]), 2),
                }
            )
    return table


def plot(table: list[dict[str, Any]], path: Path, title: str) -> None:
    """Each writer's MB/s (median, bars min-max) for the file and the shards, and its client
    CPU per GiB: the SDK and FUSE in blue, the writers straight to S3 in orange."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in ("file", "shards") if any(r["kind"] == k for r in table)]
    fig, axes = plt.subplots(1, len(kinds) + 1, figsize=(5.5 * (len(kinds) + 1), 4))
    for ax, kind in zip(axes, kinds, strict=False):
        rows = [r for r in table if r["kind"] == kind]
        values = [r["mb_s"] for r in rows]
        colors = ["#4c72b0" if r["writer"].startswith("reservoir") else "#dd8452" for r in rows]
        ax.barh([r["writer"] for r in rows], values, color=colors)
        errors = [
            [r["mb_s"] - r["min_mb_s"] for r in rows],
            [r["max_mb_s"] - r["mb_s"] for r in rows],
        ]
        ax.errorbar(values, range(len(rows)), xerr=errors, fmt="none", ecolor="black")
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:.0f}", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("MB/s (median; bars min-max)")
        ax.set_title(f"save: {kind}", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    rows = [r for r in table if r["kind"] == "file"]
    ax = axes[-1]
    colors = ["#4c72b0" if r["writer"].startswith("reservoir") else "#dd8452" for r in rows]
    ax.barh([r["writer"] for r in rows], [r["client_cpu_s_per_gib"] for r in rows], color=colors)
    ax.invert_yaxis()
    ax.set_xlabel("client CPU s per GiB (median), file save")
    ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=2048, help="the saved file (2048)")
    parser.add_argument("--shards", type=int, default=64, help="shards saved (64; 0: none)")
    parser.add_argument("--shard-mb", type=int, default=32, help="MiB per shard (32)")
    parser.add_argument("--dcp-mb", type=int, default=1024, help="the DCP state dict (1024)")
    parser.add_argument("--readers", type=int, default=4, help="loading processes (4)")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--capacity", default="3GiB", help="memory tier per worker")
    parser.add_argument("--no-dcp", action="store_true", help="skip the DCP rows")
    parser.add_argument("--no-fuse", action="store_true", help="skip the FUSE writer")
    parser.add_argument(
        "--save-runs", type=int, default=1, help="rounds of saves; rows show medians (1)"
    )
    parser.add_argument(
        "--gateway", action="store_true", help="also save through `reservoir gateway` (boto3)"
    )
    parser.add_argument("--s3", choices=("seaweedfs", "moto"), default="seaweedfs")
    add_shm_arguments(parser)
    results = Path(__file__).resolve().parent / "results"
    parser.add_argument("--json", type=Path, default=results / "checkpoint_write_bench.json")
    parser.add_argument("--png", type=Path, default=results / "checkpoint_write_bench.png")
    args = parser.parse_args()
    os.environ.update(DEV_CREDENTIALS)
    size = args.size_mb * MiB
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        s3 = S3Choice(args.s3, Path(tmp))
        endpoint = s3.start()
        try:
            cluster = LocalCluster.up(
                Path(tmp) / "cluster",
                workers=args.workers,
                capacity=args.capacity,
                shm=True,
                s3_endpoint=endpoint,
                env={**(DEV_CREDENTIALS if endpoint else {}), **shm_env(args)},
            )
            try:
                rows, table = run(cluster, s3, args, size, Path(tmp))
            finally:
                cluster.down()
        finally:
            s3.stop()
    command = "python bench/checkpoint_write_bench.py " + " ".join(sys.argv[1:])
    print(f"{command}\nS3 server: {args.s3}; {args.readers} loaders")
    print(f"{'writer':<32} {'kind':<7} {'MB/s':>7} {'min':>7} {'max':>7} {'CPU s/GiB':>10}")
    for t in table:
        print(
            f"{t['writer']:<32} {t['kind']:<7} {t['mb_s']:>7} {t['min_mb_s']:>7} "
            f"{t['max_mb_s']:>7} {t['client_cpu_s_per_gib']:>10}"
        )
    print(f"\n{'metric':<58} {'value':>8} {'baseline':>9} {'ratio':>6} {'target':>7}  verdict")
    for r in rows:
        print(
            f"{r['metric']:<58} {r.get('value', ''):>8} {r.get('baseline', ''):>9} "
            f"{r.get('ratio', ''):>6} {r.get('target', ''):>7}  {r['verdict']}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "command": command,
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "rows": rows,
                "saves": table,
            },
            indent=2,
        )
    )
    plot(table, args.png, f"{command}  (S3: {args.s3})")
    print(f"wrote {args.json} and {args.png}")


class CpuMeter:
    """CPU seconds (utime + stime) of this process, the workers, the master and the S3
    server: on a shared machine they hold up better than wall time, and show what a
    save costs beyond the upload itself."""

    def __init__(self, cluster: LocalCluster, s3: S3Choice) -> None:
        self._cluster, self._s3 = cluster, s3
        self._workers = [cluster.processes[n].pid for n in cluster.worker_names()]
        self._master = cluster.processes["master"].pid

    def now(self) -> dict[str, float]:
        return {
            "client": time.process_time(),
            "workers": sum(cpu_seconds(pid) for pid in self._workers),
            "master": cpu_seconds(self._master),
            "s3 server": self._s3.cpu_seconds(self._cluster),
        }

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: round(after[k] - before[k], 2) for k in before}


def run(
    cluster: LocalCluster, s3: S3Choice, args: argparse.Namespace, size: int, tmp: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    cluster.s3_client().create_bucket(Bucket=BUCKET)
    master = cluster.master_address
    with Client(master) as rs:
        rs.mount("/bench", f"s3://{BUCKET}/rs/", endpoint_url=cluster.s3_endpoint, writable=True)
    data = _payload(size)
    expected = crc32c.crc32c(data)
    mb = size / MiB
    fuse: FuseMount | None = None
    fuse_reason = "--no-fuse"
    if not args.no_fuse:
        fuse = FuseMount(master, tmp)
        try:
            fuse.start()
        except (savers.Unavailable, OSError, subprocess.SubprocessError) as exc:
            fuse_reason, fuse = str(exc), None
    try:
        saves = measure_saves(cluster, s3, args, data, fuse)
    finally:
        if fuse is not None:
            fuse.stop()
    if fuse is None:
        saves["unavailable"][FUSE] = f"not measured: {fuse_reason}"
    rows = save_rows(saves, args)
    table = save_table(saves, args)
    boto_rate = _median_rate(saves["runs"][BOTO3]["file"], mb)

    if args.gateway:
        cluster.start_gateway()
        gw_save = save_gateway(cluster, "gateway/file.bin", data)
        print(f"save through the S3 gateway: {mb / gw_save:.0f} MB/s", file=sys.stderr)
        # No target in the issues: the gateway receives every part before it writes them
        # through, so it costs about two transfers where a direct upload costs one.
        rows.append(
            _row(
                f"gateway save {args.size_mb} MiB, MB/s / boto3 direct",
                mb / gw_save,
                boto_rate,
                0.0,
            )
        )

    gets = cluster.s3_counts().get("GET", 0)
    loads = load_in_processes(_read_reservoir, (master, "/bench/sdk/file.bin"), args.readers)
    s3_gets = cluster.s3_counts().get("GET", 0) - gets
    boto = load_in_processes(_read_boto3, (cluster.s3_endpoint, "boto3/file.bin"), args.readers)
    for _seconds, total, crc in loads + boto:
        if total != size or crc != expected:
            raise SystemExit(f"a load read {total} bytes, CRC {crc:#x}: not what was saved")
    rs_rate = sum(mb / s for s, _, _ in loads) / len(loads)
    boto_load = sum(mb / s for s, _, _ in boto) / len(boto)
    print(
        f"load x{args.readers}: reservoir {rs_rate:.0f} MB/s per process ({s3_gets} S3 GETs), "
        f"boto3 {boto_load:.0f}",
        file=sys.stderr,
    )
    rows.append(
        _row(
            f"load x{args.readers} right after save, MB/s per process / boto3",
            rs_rate,
            boto_load,
            5.0,
            f"{s3_gets} S3 GETs",
        )
    )
    if s3_gets:
        rows[-1]["verdict"] = f"not met ({s3_gets} S3 GETs, target 0)"
    del data

    if not args.no_dcp:
        state = _state(args.dcp_mb)
        dcp_mb = sum(t.numel() * t.element_size() for t in state.values()) / MiB
        gets = cluster.s3_counts().get("GET", 0)
        rs_times = dcp_round_trip("reservoir:///bench/dcp", state, master=master)
        dcp_gets = cluster.s3_counts().get("GET", 0) - gets
        s3_times = dcp_round_trip(
            f"s3://{BUCKET}/s3fs/dcp",
            state,
            key=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            client_kwargs={"endpoint_url": cluster.s3_endpoint},
        )
        rows.append(
            _row(
                f"DCP save {dcp_mb:.0f} MiB, MB/s / FsspecWriter on s3fs",
                dcp_mb / rs_times[0],
                dcp_mb / s3_times[0],
                1.0,
            )
        )
        rows.append(
            _row(
                f"DCP load {dcp_mb:.0f} MiB right after, MB/s / s3fs",
                dcp_mb / rs_times[1],
                dcp_mb / s3_times[1],
                3.0,
                f"{dcp_gets} S3 GETs",
            )
        )
    return rows, table


if __name__ == "__main__":
    main()
