"""The writers `checkpoint_write_bench.py` saves with: Reservoir's SDK and FUSE mount, and
what a trainer would use instead straight to S3 (boto3, s3fs, s3torchconnector). Each
saves one object from bytes in memory, as a checkpoint is; `save_shards` runs one over
many objects, `SHARD_THREADS` at once, as a sharded save's writer threads do.

A writer that cannot run here (a package not installed, no /dev/fuse, no custom
endpoint) raises `Unavailable` with the reason, which the bench prints instead of a row.
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MiB = 1 << 20
PIECE = 16 * MiB  # the size of each write() call, as torch.save's large tensors make them
SHARD_THREADS = 8
# boto3 tuned as a user chasing throughput would: parts of 32 MiB, 16 threads.
TUNED_PART = 32 * MiB
TUNED_THREADS = 16

Save = Callable[[str, memoryview], None]  # (object name, bytes)


class Unavailable(Exception):
    """This writer cannot run on this machine; the message says why."""


def _pieces(write: Callable[[memoryview], Any], data: memoryview) -> None:
    for offset in range(0, len(data), PIECE):
        write(data[offset : offset + PIECE])


def reservoir_sdk(client: Any, root: str) -> Save:
    """`Client.open(path, "wb")`, 16 MiB writes: published, its blocks kept, on close."""

    def save(name: str, data: memoryview) -> None:
        with client.open(f"{root}/{name}", "wb") as f:
            _pieces(f.write, data)

    return save


def boto3_upload(s3: Any, bucket: str, prefix: str, *, tuned: bool) -> Save:
    """boto3 `upload_fileobj`, with its default TransferConfig (8 MiB parts, 10 threads)
    or tuned (`TUNED_PART` parts, `TUNED_THREADS` threads)."""
    from boto3.s3.transfer import TransferConfig

    config = (
        TransferConfig(
            multipart_threshold=TUNED_PART,
            multipart_chunksize=TUNED_PART,
            max_concurrency=TUNED_THREADS,
        )
        if tuned
        else TransferConfig()
    )

    def save(name: str, data: memoryview) -> None:
        s3.upload_fileobj(io.BytesIO(data), bucket, f"{prefix}/{name}", Config=config)

    return save


def s3fs_open(endpoint: str, key: str, secret: str, bucket: str, prefix: str) -> Save:
    """s3fs `open(url, "wb")` with its defaults (50 MiB blocks), 16 MiB writes."""
    import s3fs

    fs = s3fs.S3FileSystem(
        key=key, secret=secret, client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True
    )

    def save(name: str, data: memoryview) -> None:
        with fs.open(f"{bucket}/{prefix}/{name}", "wb") as f:
            _pieces(f.write, data)

    return save


def s3torchconnector_checkpoint(endpoint: str, bucket: str, prefix: str) -> Save:
    """s3torchconnector's `S3Checkpoint(...).writer(url)` (Mountpoint's CRT client, its
    default 8 MiB parts), path-style to the bench's endpoint, 16 MiB writes."""
    try:
        from s3torchconnector import S3Checkpoint, S3ClientConfig
    except ImportError as exc:
        raise Unavailable(f"s3torchconnector is not installed ({exc})") from exc
    checkpoint = S3Checkpoint(
        region=os.environ.get("AWS_REGION", "us-east-1"),
        endpoint=endpoint,
        s3client_config=S3ClientConfig(force_path_style=True),
    )

    def save(name: str, data: memoryview) -> None:
        with checkpoint.writer(f"s3://{bucket}/{prefix}/{name}") as f:
            _pieces(f.write, data)

    return save


def fuse_write(mountpoint: Path) -> Save:
    """Plain `open(path, "wb")` on a `reservoir fuse --writable` mount, 16 MiB writes."""

    def save(name: str, data: memoryview) -> None:
        path = mountpoint / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            _pieces(f.write, data)

    return save


def fuse_torch_save(mountpoint: Path) -> Save:
    """`torch.save` of the bytes (a uint8 tensor over them) to a path on the mount: what a
    training script that saves to a path does."""
    import torch

    def save(name: str, data: memoryview) -> None:
        path = mountpoint / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():  # read-only bytes: torch.save only reads them
            warnings.simplefilter("ignore", UserWarning)
            tensor = torch.frombuffer(data, dtype=torch.uint8)
        torch.save(tensor, path)

    return save


def save_shards(save: Save, name: str, data: memoryview, shards: int, shard_size: int) -> None:
    """`shards` objects `name/shard-NN` of `shard_size` bytes each (slices of `data`,
    repeated if it is shorter), `SHARD_THREADS` written at once."""

    def one(i: int) -> None:
        start = (i * shard_size) % max(1, len(data) - shard_size + 1)
        save(f"{name}/shard-{i:03d}", data[start : start + shard_size])

    with ThreadPoolExecutor(SHARD_THREADS) as pool:
        list(pool.map(one, range(shards)))
