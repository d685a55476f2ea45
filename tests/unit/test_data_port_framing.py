"""The worker's data port in this process, over a socket pair: frames in, framed answers
out, in request order, each with its CRC32C or the error table's code; a connection that
must authenticate is served nothing before AUTH; a frame that is not one closes it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from reservoir.common.blocks import block_transfer as wire
from reservoir.common.blocks.block_file import checksum
from reservoir.common.errors import (
    InvalidArgument,
    OutOfRange,
    Unauthenticated,
    code_value,
)
from reservoir.common.serving import auth
from reservoir.v1 import worker_pb2
from reservoir.worker.data_port_admission import Admission
from reservoir.worker.data_port_connection import Connection
from reservoir.worker.data_port_metrics import DataPortMetrics
from reservoir.worker.data_port_transport import PlainChannel
from reservoir.worker.read_request import BlockRequest
from tests.unit.worker_fixture import BLOCK, request, worker

DATA = bytes(range(251)) * 40  # 10,040 bytes: blocks of 4096, 4096, 1848


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "under").mkdir()
    (tmp_path / "under" / "f").write_bytes(DATA)
    return tmp_path / "under"


def _frame(block: BlockRequest) -> bytes:
    return wire.encode_request(
        worker_pb2.ReadBlockRequest(
            file_id=block.file_id,
            index=block.index,
            offset=block.offset,
            length=block.length,
            ufs_uri=block.ufs_uri,
            etag=block.etag,
            file_size=block.file_size,
            block_size=block.block_size,
            mount_path=block.mount_path,
        ).SerializeToString()
    )


def _exchange(
    root: Path, sent: bytes, *, tokens: auth.TokenTable | None = None, shm: Path | None = None
) -> list[tuple[int, int, bytes]]:
    """Writes `sent` (frames, all at once: pipelined) and half-closes; returns every
    response (status, crc, body) the worker's connection sent before closing."""
    service = worker(root, shm_dir=shm)
    config = service.config
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)

    async def run() -> bytes:
        if shm is not None:  # the blocks held in shared memory first: sent as files
            await service.read(request(root, "f", len(DATA), index=0))
        channel = PlainChannel(theirs, 10, 10)
        metrics = DataPortMetrics(CollectorRegistry())
        serving = asyncio.create_task(
            Connection(channel, service, config, metrics, Admission(channel, tokens, None)).serve()
        )
        ours.sendall(sent)
        ours.shutdown(socket.SHUT_WR)
        await serving
        received = bytearray()
        ours.setblocking(False)
        # A worker that closes with our bytes unread resets the connection after its last
        # response, instead of an end of stream.
        with contextlib.suppress(ConnectionResetError, BlockingIOError):
            while chunk := ours.recv(1 << 20):
                received += chunk
        return bytes(received)

    raw = asyncio.run(run())
    ours.close()
    answers = []
    while raw:
        header = wire.ResponseHeader.decode(raw[: wire.RESPONSE_HEADER.size])
        raw = raw[wire.RESPONSE_HEADER.size :]
        answers.append((header.status, header.crc32c, raw[: header.length]))
        raw = raw[header.length :]
    return answers


def test_pipelined_requests_are_answered_in_order_each_with_its_ranges_crc(root: Path) -> None:
    blocks = [
        request(root, "f", len(DATA), index=2),
        request(root, "f", len(DATA), index=0, offset=100, length=50),
        request(root, "f", len(DATA), index=1),
    ]
    answers = _exchange(root, b"".join(_frame(b) for b in blocks))
    expected = [DATA[2 * BLOCK :], DATA[100:150], DATA[BLOCK : 2 * BLOCK]]
    assert answers == [(0, checksum(e), e) for e in expected]


def test_a_bad_request_gets_its_error_code_and_the_next_one_is_still_served(root: Path) -> None:
    escape = request(root, "f", len(DATA), ufs_uri=f"file://{root}/../../etc/passwd")
    past_end = request(root, "f", len(DATA), index=7)
    good = request(root, "f", len(DATA), index=0, length=10)
    answers = _exchange(root, _frame(escape) + _frame(past_end) + _frame(good))
    codes = [status for status, _, _ in answers]
    assert codes == [code_value(InvalidArgument()), code_value(OutOfRange()), 0]
    assert b"ufs_uri" in answers[0][2]
    assert answers[2][2] == DATA[:10]


def test_a_whole_block_held_in_shared_memory_is_sent_from_its_file(
    root: Path, tmp_path: Path
) -> None:
    answers = _exchange(root, _frame(request(root, "f", len(DATA))), shm=tmp_path / "shm")
    assert answers == [(0, checksum(DATA[:BLOCK]), DATA[:BLOCK])]


def test_a_connection_that_must_authenticate_gets_an_error_and_nothing_else(
    root: Path,
) -> None:
    tokens = auth.TokenTable.parse([f"reader {auth.token_hash('rsv_good')}"])
    read = _frame(request(root, "f", len(DATA), length=10))
    (refused,) = _exchange(root, read + read, tokens=tokens)
    assert refused[0] == code_value(Unauthenticated())
    ok, data = _exchange(root, wire.encode_auth("rsv_good") + read, tokens=tokens)
    assert ok == (0, 0, b"") and data == (0, checksum(DATA[:10]), DATA[:10])


def test_a_frame_that_is_not_a_request_is_answered_invalid_argument_and_closed(
    root: Path,
) -> None:
    read = _frame(request(root, "f", len(DATA), length=10))
    (answer,) = _exchange(root, b"GET / HTTP/1.1\r\n" + read)
    assert answer[0] == code_value(InvalidArgument())
    assert b"magic" in answer[2]
