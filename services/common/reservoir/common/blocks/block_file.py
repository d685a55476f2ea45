"""A cached block as a file: a fixed header that pins what the bytes are, then the bytes.

Workers write these (shared-memory and disk tiers); a client on the same host reads them
directly (short-circuit). The header carries the block's length, its offset in the object
and the CRC32C taken when the block landed, so a reader of the file needs nothing else to
know whether the bytes are the ones that were cached. Readers copy the bytes into their
own memory with pread and verify that copy: a file another process can write is never
trusted, and never mapped.

CRC32C (Castagnoli), from the `crc32c` package: hardware (SSE4.2/ARMv8) CRC at ~24 GB/s
on this kind of machine, about 8x the best gRPC stream and above a page-cache read, so
checking every block costs a few percent of a warm read; it is also the checksum S3 offers
for objects. It takes any buffer (memoryview slices, mmaps) without a copy, which
`google-crc32c` (bytes only, same speed) does not. xxh3 is faster still (~50 GB/s) but
both are far from the bottleneck.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterable

import crc32c

from reservoir.common.errors import DataLoss

MAGIC = b"RSVBLK01"
# magic, crc32c, flags (0), block length, offset of the block in its object
HEADER = struct.Struct("<8sIIQQ")
HEADER_SIZE = HEADER.size


Buffer = bytes | bytearray | memoryview | mmap.mmap


def checksum(data: Buffer, crc: int = 0) -> int:
    """The CRC32C of `data`; of the bytes before it and `data`, given `crc`, theirs."""
    return int(crc32c.crc32c(data, crc))


def checksum_of_pieces(pieces: Iterable[Buffer]) -> int:
    crc = 0
    for piece in pieces:
        crc = crc32c.crc32c(piece, crc)
    return int(crc)


def header(crc: int, length: int, offset: int) -> bytes:
    return HEADER.pack(MAGIC, crc, 0, length, offset)


def write_block_file(
    path: str,
    data: bytes | memoryview,
    crc: int,
    offset: int,
    *,
    fsync: bool = False,
    spare: str | None = None,
) -> None:
    """Writes the block under a temporary name, then renames it: a reader sees the whole
    block or no file. `fsync`: the bytes reach the device before the rename (a power
    loss then leaves the whole block or none; without it, a torn file that fails its
    checksum, which a disk tier drops when it starts). `spare`: a file no reader has seen
    (worker/spare_block_files.py) to write over, whose pages are already there."""
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # left by a crash; it may not be writable
    if spare is not None:
        os.rename(spare, tmp)
        fd = os.open(tmp, os.O_WRONLY)
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444)
    try:
        if spare is not None:
            os.ftruncate(fd, HEADER_SIZE + len(data))
            os.fchmod(fd, 0o444)
        for part in (memoryview(header(crc, len(data), offset)), memoryview(data)):
            while part:
                part = part[os.write(fd, part) :]
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)


def _header_of(path: str, fd: int) -> tuple[int, int, int]:
    return _parsed_header(path, os.pread(fd, HEADER_SIZE, 0))


def _parsed_header(path: str, raw: bytes | bytearray) -> tuple[int, int, int]:
    if len(raw) != HEADER_SIZE:
        raise DataLoss(f"block file {path}: truncated header")
    magic, crc, _flags, length, offset = HEADER.unpack(raw)
    if magic != MAGIC:
        raise DataLoss(f"block file {path}: not a block file")
    return crc, length, offset


def _check_geometry(
    path: str, stored_length: int, stored_offset: int, length: int, offset: int
) -> None:
    if stored_length != length or stored_offset != offset:
        raise DataLoss(
            f"block file {path}: holds {stored_length} bytes at {stored_offset}, "
            f"expected {length} at {offset}"
        )


def read_block_header(path: str) -> tuple[int, int, int]:
    """The (crc, length, offset) a block file's header claims; DataLoss if it has none."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return _header_of(path, fd)
    finally:
        os.close(fd)


def _open_checked(path: str, length: int, offset: int) -> tuple[int, int]:
    """An open descriptor of the block file and the checksum its header records, once the
    header says it holds `length` bytes at `offset` of the object."""
    fd = os.open(path, os.O_RDONLY)
    try:
        crc, stored_length, stored_offset = _header_of(path, fd)
        _check_geometry(path, stored_length, stored_offset, length, offset)
    except BaseException:
        os.close(fd)
        raise
    return fd, crc


def read_block_file(
    path: str, length: int, offset: int, *, verify: bool = True
) -> tuple[bytes, int]:
    """The block's bytes (a private copy) and their checksum, verified against the header
    (`verify=False` checks only the header and length: for measuring what the check costs).

    FileNotFoundError when there is no such file; DataLoss when the file is not the block
    it should be (wrong geometry, truncated, or bytes that fail their checksum).
    """
    fd, crc = _open_checked(path, length, offset)
    try:
        data = os.pread(fd, length, HEADER_SIZE)
    finally:
        os.close(fd)
    if len(data) != length:
        raise DataLoss(f"block file {path}: {len(data)} of {length} bytes")
    if verify and checksum(data) != crc:
        raise DataLoss(f"block file {path}: checksum mismatch")
    return data, crc


def read_block_file_into(path: str, out: memoryview, offset: int, *, verify: bool = True) -> int:
    """The whole block, `len(out)` bytes, read straight into `out` (the caller's buffer:
    no intermediate copy) and verified there, as `read_block_file` does. Returns its
    checksum. `out` holds garbage when this raises."""
    length = len(out)
    head = bytearray(HEADER_SIZE)
    fd = os.open(path, os.O_RDONLY)
    try:
        # Header and bytes in one system call (a small file's read is mostly calls).
        got = os.preadv(fd, [head, out], 0)
    finally:
        os.close(fd)
    crc, stored_length, stored_offset = _parsed_header(path, head[: max(0, got)])
    _check_geometry(path, stored_length, stored_offset, length, offset)
    if got != HEADER_SIZE + length:
        raise DataLoss(f"block file {path}: {got - HEADER_SIZE} of {length} bytes")
    if verify and checksum(out) != crc:
        raise DataLoss(f"block file {path}: checksum mismatch")
    return crc
