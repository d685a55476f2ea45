"""The one check every block a client receives passes before it is returned, whatever
route brought it (gRPC, a data port, the under-store): the exact length asked for and,
where the sender vouched for them, the checksum of the bytes. Block files on this host
are checked on reading (`reservoir.common.blocks.block_file`) against their header, alike."""

from __future__ import annotations

from collections.abc import Sequence

from reservoir.common.blocks.block_file import Buffer, checksum_of_pieces
from reservoir.common.errors import DataLoss


def check_block(
    what: str, data: Buffer | Sequence[Buffer], expected: int, crc: int | None, verify: bool
) -> None:
    """DataLoss naming `what` unless `data` (one buffer or the pieces of one) is `expected`
    bytes long and, with `verify`, matches `crc` (None: the sender sent none; the
    under-store, which has no CRC32C of ours, is checked for length only)."""
    pieces = [data] if isinstance(data, Buffer) else data
    received = sum(len(p) for p in pieces)
    if received != expected:
        raise DataLoss(f"{what}: {received} bytes, expected {expected}")
    if not verify:
        return
    if crc is None:
        raise DataLoss(f"{what}: no checksum")
    if checksum_of_pieces(pieces) != crc:
        raise DataLoss(f"{what}: checksum mismatch")
