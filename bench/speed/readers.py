"""How each row reads a data set. Every reader times only its reading and checks the bytes
afterwards (CRC32C of every file, untimed), returning a `Read`.

S3 readers: boto3 `get_object`, s3fs `cat_file`, fsspec simplecache over s3fs.
Reservoir readers (public API only): `Client.read` per file, `Client.read_many` batches,
`Client.open(path).read()`, a `readinto` loop, and several client processes at once.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c

from .datasets import BUCKET, Dataset
from .results import MiB

READINTO_BYTES = 16 * MiB


@dataclass
class Read:
    nbytes: int
    files: int
    seconds: float
    wrong: list[str] = field(default_factory=list)  # files whose bytes are not the uploaded
    extra: dict[str, Any] = field(default_factory=dict)


Reader = Callable[[], Read]


def per_file(
    pool: cf.ThreadPoolExecutor,
    get: Callable[[str], bytes],
    ds: Dataset,
    names: Sequence[str],
    verify: bool = True,
) -> Read:
    """`get(name)` for every name of `names` (in `ds.order`), on `pool`."""
    start = time.perf_counter()
    datas = list(pool.map(get, names))
    seconds = time.perf_counter() - start
    wrong = ds.wrong_files(datas) if verify else []
    return Read(sum(map(len, datas)), len(datas), seconds, wrong)


# ---- S3 -----------------------------------------------------------------------------------


def boto3_client(endpoint: str, pool: int) -> Any:
    import boto3
    from botocore.config import Config

    from reservoir.local.cluster import DEV_CREDENTIALS

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=DEV_CREDENTIALS["AWS_DEFAULT_REGION"],
        config=Config(max_pool_connections=pool, s3={"addressing_style": "path"}),
    )


def boto3_reader(
    s3: Any, ds: Dataset, pool: cf.ThreadPoolExecutor, bucket: str = BUCKET, verify: bool = False
) -> Reader:
    """get_object per file on `pool`; `bucket` names the S3 bucket, or for the S3 gateway
    the mount's top-level directory (the keys are the same: the mount maps the bucket)."""

    def get(key: str) -> bytes:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        try:
            return bytes(body.read())
        finally:
            body.close()

    return lambda: per_file(pool, get, ds, ds.s3_keys(), verify=verify)


def s3fs_options(endpoint: str) -> dict[str, Any]:
    from reservoir.local.cluster import DEV_CREDENTIALS

    return {
        "key": DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "secret": DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "client_kwargs": {
            "endpoint_url": endpoint,
            "region_name": DEV_CREDENTIALS["AWS_DEFAULT_REGION"],
        },
        "skip_instance_cache": True,
    }


def s3fs_reader(endpoint: str, ds: Dataset, pool: cf.ThreadPoolExecutor) -> Reader:
    """`cat_file` per file (this s3fs sends a HEAD before each GET)."""
    import s3fs

    fs = s3fs.S3FileSystem(**s3fs_options(endpoint))
    keys = [f"{BUCKET}/{k}" for k in ds.s3_keys()]
    return lambda: per_file(pool, fs.cat_file, ds, keys, verify=False)


def simplecache_reader(
    endpoint: str, ds: Dataset, pool: cf.ThreadPoolExecutor, cache_dir: Path
) -> Reader:
    """fsspec's whole-file local disk cache over s3fs; the first epoch fills `cache_dir`,
    later ones read it. `open` + `read` per file, as a Dataset would."""
    import fsspec

    fs = fsspec.filesystem(
        "simplecache",
        target_protocol="s3",
        target_options=s3fs_options(endpoint),
        cache_storage=str(cache_dir),
        skip_instance_cache=True,
    )

    def get(key: str) -> bytes:
        with fs.open(f"{BUCKET}/{key}", "rb") as f:
            return bytes(f.read())

    return lambda: per_file(pool, get, ds, ds.s3_keys(), verify=False)


def boto3_one_get(s3: Any, ds: Dataset) -> Reader:
    """The whole checkpoint in one `get_object(...).read()`."""
    (key,) = ds.s3_keys()

    def read() -> Read:
        start = time.perf_counter()
        body = s3.get_object(Bucket=BUCKET, Key=key)["Body"]
        n = len(body.read())
        body.close()
        return Read(n, 1, time.perf_counter() - start)

    return read


# ---- local ceilings -----------------------------------------------------------------------


def readinto_loop(f: Any, buffer: memoryview, verify: bool) -> tuple[int, int, float]:
    """(bytes, crc32c, seconds spent in crc32c) of a `readinto` loop over `f`."""
    n = crc = 0
    crc_s = 0.0
    while got := f.readinto(buffer):
        n += got
        if verify:
            t = time.perf_counter()
            crc = crc32c.crc32c(buffer[:got], crc)
            crc_s += time.perf_counter() - t
    return n, crc, crc_s


def page_cache_reader(local: Path) -> Reader:
    """A warm local file read sequentially with `readinto` into one 16 MiB buffer."""
    buffer = memoryview(bytearray(READINTO_BYTES))

    def read() -> Read:
        start = time.perf_counter()
        with open(local, "rb", buffering=0) as f:
            n, _, _ = readinto_loop(f, buffer, verify=False)
        return Read(n, 1, time.perf_counter() - start)

    return read


# ---- Reservoir ----------------------------------------------------------------------------


def reservoir_read(client: Any, ds: Dataset, pool: cf.ThreadPoolExecutor) -> Reader:
    """`Client.read(path)` per file, on `pool` (16 threads: a DataLoader's workers)."""
    paths = ds.paths()
    return lambda: per_file(pool, client.read, ds, paths)


def reservoir_read_many(
    client: Any, ds: Dataset, pool: cf.ThreadPoolExecutor, batch: int
) -> Reader:
    """`Client.read_many` of `batch` paths per call, as many calls in flight as `pool` has
    threads."""
    paths = ds.paths()
    batches = [paths[i : i + batch] for i in range(0, len(paths), batch)]

    def read() -> Read:
        start = time.perf_counter()
        done = list(pool.map(client.read_many, batches))
        seconds = time.perf_counter() - start
        datas = [d for b in done for d in b]
        return Read(sum(map(len, datas)), len(datas), seconds, ds.wrong_files(datas))

    return read


def reservoir_open_read(client: Any, ds: Dataset) -> Reader:
    """`Client.open(path).read()`: the whole file as one bytes object."""
    (path,) = ds.paths()
    (name,) = ds.order

    def read() -> Read:
        start = time.perf_counter()
        with client.open(path) as f:
            data = f.read()
        seconds = time.perf_counter() - start
        wrong = ds.wrong_files([data])
        return Read(len(data), 1, seconds, wrong)

    return read


def reservoir_readinto(client: Any, ds: Dataset) -> Reader:
    """`Client.open(path)` and a `readinto` loop into one 16 MiB buffer. The CRC32C of each
    chunk is taken between reads and its time (about 0.7 ms per chunk) left out of
    `seconds`; `extra` keeps the wall time with it."""
    (path,) = ds.paths()
    (name,) = ds.order
    buffer = memoryview(bytearray(READINTO_BYTES))

    def read() -> Read:
        start = time.perf_counter()
        with client.open(path) as f:
            n, crc, crc_s = readinto_loop(f, buffer, verify=True)
        wall = time.perf_counter() - start
        wrong = [] if n == ds.sizes[name] and crc == ds.crcs[name] else [name]
        return Read(n, 1, wall - crc_s, wrong, {"wall_with_crc_s": wall, "crc_s": crc_s})

    return read


# ---- several client processes -------------------------------------------------------------


def _process_main(
    master: str,
    short_circuit: bool,
    paths: list[str],
    crcs: list[int],
    threads: int,
    batch: int,
    seed: int,
    barrier: Any,
    results: Any,
) -> None:
    """One client process: lists the directory and reads one batch (untimed, so channels
    are open), waits for the others, then reads every path in its own order."""
    from reservoir.client import Client
    from reservoir.common.config import ClientConfig

    order = list(range(len(paths)))
    random.Random(seed).shuffle(order)
    batches = [order[i : i + batch] for i in range(0, len(order), batch)]
    config = ClientConfig(master=master, short_circuit=short_circuit)
    with Client(config=config) as client, cf.ThreadPoolExecutor(threads) as pool:
        client.ls(paths[0].rsplit("/", 1)[0])
        client.read_many([paths[i] for i in batches[0]])
        barrier.wait()
        start = time.perf_counter()
        done = list(pool.map(lambda b: client.read_many([paths[i] for i in b]), batches))
        end = time.perf_counter()
    wrong = [
        paths[i]
        for b, datas in zip(batches, done, strict=True)
        for i, d in zip(b, datas, strict=True)
        if crc32c.crc32c(d) != crcs[i]
    ]
    nbytes = sum(len(d) for datas in done for d in datas)
    results.put((start, end, nbytes, len(paths), wrong))


def reservoir_processes(
    master: str, ds: Dataset, processes: int, threads: int, batch: int, short_circuit: bool
) -> Reader:
    """`processes` client processes, each reading the whole data set with `read_many`
    (`threads` x `batch` paths); the time is from the first start to the last end
    (perf_counter is CLOCK_MONOTONIC, one clock for every process)."""
    paths = ds.paths()
    crcs = [ds.crcs[n] for n in ds.order]
    ctx = mp.get_context("spawn")

    def read() -> Read:
        barrier = ctx.Barrier(processes + 1)
        results = ctx.Queue()
        procs = [
            ctx.Process(
                target=_process_main,
                args=(master, short_circuit, paths, crcs, threads, batch, i, barrier, results),
                daemon=True,
            )
            for i in range(processes)
        ]
        for p in procs:
            p.start()
        barrier.wait(timeout=120)
        got = [results.get(timeout=600) for _ in procs]
        for p in procs:
            p.join(30)
        seconds = max(g[1] for g in got) - min(g[0] for g in got)
        per_process = [g[2] / MiB / (g[1] - g[0]) for g in got]
        return Read(
            sum(g[2] for g in got),
            sum(g[3] for g in got),
            seconds,
            [w for g in got for w in g[4]],
            {"per_process_mb_s": per_process},
        )

    return read
