"""The data sets of issue #8, made from a seed and uploaded with nothing timed.

- small: files of 8-40 KB, read in a shuffled order;
- large: files of 32 MiB;
- checkpoint: one large file (2 GiB by default), also written to a local file that the
  page-cache ceiling reads.

Every file's CRC32C is kept so each Reservoir row can check the bytes it read.
"""

from __future__ import annotations

import concurrent.futures as cf
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c

from .results import MiB

BUCKET = "reservoir-bench"
MOUNT = "/bench"
CHUNK = 64 * MiB


@dataclass
class Dataset:
    name: str
    prefix: str  # key prefix in the bucket, ending with "/"
    sizes: dict[str, int]  # file name -> size
    crcs: dict[str, int] = field(default_factory=dict)  # file name -> CRC32C
    order: list[str] = field(default_factory=list)  # shuffled read order

    @property
    def nbytes(self) -> int:
        return sum(self.sizes.values())

    def paths(self, mount: str = MOUNT) -> list[str]:
        """Reservoir paths in read order."""
        return [f"{mount}/{self.prefix}{n}" for n in self.order]

    def s3_keys(self) -> list[str]:
        """S3 keys in read order."""
        return [self.prefix + n for n in self.order]

    def at(self, prefix: str) -> Dataset:
        """The same files (and order) under another prefix: a never-listed copy."""
        return Dataset(self.name, prefix, self.sizes, self.crcs, self.order)

    def wrong_files(self, datas: list[bytes]) -> list[str]:
        """Names (in read order) whose bytes are not the uploaded ones."""
        return [
            n
            for n, d in zip(self.order, datas, strict=True)
            if len(d) != self.sizes[n] or crc32c.crc32c(d) != self.crcs[n]
        ]


def small_dataset(files: int, rng: random.Random) -> Dataset:
    sizes = {f"sample-{i:06d}.bin": rng.randint(8 * 1024, 40 * 1024) for i in range(files)}
    return _shuffled(Dataset("small", "small/", sizes), rng)


def large_dataset(files: int, file_mb: int, rng: random.Random) -> Dataset:
    sizes = {f"part-{i:04d}.bin": file_mb * MiB for i in range(files)}
    return _shuffled(Dataset("large", "large/", sizes), rng)


def checkpoint_dataset(size_mb: int) -> Dataset:
    return Dataset("checkpoint", "checkpoint/", {"model.ckpt": size_mb * MiB}, order=["model.ckpt"])


def _shuffled(ds: Dataset, rng: random.Random) -> Dataset:
    ds.order = sorted(ds.sizes)
    rng.shuffle(ds.order)
    return ds


def content(seed: int, name: str, size: int) -> bytes:
    return random.Random(f"{seed}/{name}").randbytes(size)


def upload(s3: Any, ds: Dataset, prefixes: list[str], threads: int, seed: int) -> None:
    """Puts every file of `ds` under each of `prefixes`; fills `ds.crcs`."""

    def put(name: str) -> tuple[str, int]:
        data = content(seed, name, ds.sizes[name])
        for prefix in prefixes:
            s3.put_object(Bucket=BUCKET, Key=prefix + name, Body=data)
        return name, crc32c.crc32c(data)

    with cf.ThreadPoolExecutor(threads) as pool:
        ds.crcs = dict(pool.map(put, sorted(ds.sizes)))


def write_checkpoint(ds: Dataset, local: Path, seed: int) -> None:
    """The checkpoint's bytes, written in chunks to `local` (the upload reads that file)."""
    (name,) = ds.sizes
    crc, left, i = 0, ds.sizes[name], 0
    with open(local, "wb") as f:
        while left:
            chunk = content(seed, f"{name}/{i}", min(CHUNK, left))
            crc = crc32c.crc32c(chunk, crc)
            f.write(chunk)
            left -= len(chunk)
            i += 1
    ds.crcs = {name: crc}


def upload_file(s3: Any, ds: Dataset, local: Path) -> None:
    """Multipart upload of the checkpoint (64 MiB parts, 4 at a time)."""
    from boto3.s3.transfer import TransferConfig

    (name,) = ds.sizes
    config = TransferConfig(multipart_threshold=CHUNK, multipart_chunksize=CHUNK, max_concurrency=4)
    s3.upload_file(str(local), BUCKET, ds.prefix + name, Config=config)
