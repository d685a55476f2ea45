from pathlib import Path

import pytest

from reservoir.common.blocks.block_file import (
    HEADER_SIZE,
    checksum,
    checksum_of_pieces,
    read_block_file,
    write_block_file,
)
from reservoir.common.errors import DataLoss


def test_a_block_file_reads_back_its_bytes_and_checksum(tmp_path: Path) -> None:
    data = bytes(range(256)) * 40
    path = str(tmp_path / "f-1")
    write_block_file(path, data, checksum(data), 8192)
    assert read_block_file(path, len(data), 8192) == (data, checksum(data))
    assert [p.name for p in tmp_path.iterdir()] == ["f-1"]  # no temporary left behind


def test_checksum_of_pieces_equals_checksum_of_the_whole() -> None:
    data = b"0123456789" * 1000
    assert checksum_of_pieces([data[:3], memoryview(data)[3:5000], data[5000:]]) == checksum(data)


@pytest.mark.parametrize(
    ("length", "offset"), [(10239, 8192), (10240, 0)], ids=["other-length", "other-offset"]
)
def test_a_block_file_of_another_geometry_is_refused(
    tmp_path: Path, length: int, offset: int
) -> None:
    data = b"x" * 10240
    path = str(tmp_path / "f-1")
    write_block_file(path, data, checksum(data), 8192)
    with pytest.raises(DataLoss):
        read_block_file(path, length, offset)


@pytest.mark.parametrize("where", [3, HEADER_SIZE + 5, -1], ids=["header", "middle", "last"])
def test_a_flipped_byte_anywhere_is_detected(tmp_path: Path, where: int) -> None:
    data = b"y" * 5000
    path = tmp_path / "f-0"
    write_block_file(str(path), data, checksum(data), 0)
    raw = bytearray(path.read_bytes())
    raw[where] ^= 0x01
    path.chmod(0o644)
    path.write_bytes(bytes(raw))
    with pytest.raises(DataLoss):
        read_block_file(str(path), len(data), 0)


def test_a_truncated_block_file_is_refused(tmp_path: Path) -> None:
    data = b"z" * 5000
    path = tmp_path / "f-0"
    write_block_file(str(path), data, checksum(data), 0)
    path.chmod(0o644)
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(DataLoss):
        read_block_file(str(path), len(data), 0)
