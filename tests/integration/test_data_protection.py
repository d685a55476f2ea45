"""Data protection levels of the data port on a secure cluster (RESERVOIR_DATA_PROTECTION):
at `integrity` and `authentication` the port is in clear and a reader proves its token
without sending it; at `integrity` a response changed on the way, even with its checksum
made to match, is refused and the block read the full way instead."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.client.data_port import DataPortReader
from reservoir.client.hedges import Hedges
from reservoir.client.penalty_box import PenaltyBox
from reservoir.common.blocks import block_transfer as wire
from reservoir.common.blocks.block_file import HEADER_SIZE, checksum
from reservoir.common.blocks.data_protection import NONCE_BYTES, Level
from reservoir.common.config import ClientConfig, SecuritySettings
from reservoir.common.errors import Unauthenticated, code_value
from reservoir.common.models import WorkerRecord, block_request, shm_block_name
from reservoir.local.cluster import LocalCluster
from tests.integration.data_port_relay import DataPortRelay

BLOCK = 64 * 1024
DATA = os.urandom(3 * BLOCK + 1234)
PATH = "/prot/x.bin"


@pytest.fixture(scope="module", params=[Level.INTEGRITY, Level.AUTHENTICATION])
def protected(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalCluster, Level]]:
    """A secure cluster whose data ports run at the level, DATA in a mount, read once.
    Blocks in shared-memory files: a fetched block goes out from its landing buffer, a
    held one from its block file, each its own way through the seal."""
    level: Level = request.param
    cluster = LocalCluster.up(
        tmp_path_factory.mktemp(f"protection-{level}"),
        workers=2,
        secure=True,
        shm=True,
        env={"RESERVOIR_DATA_PROTECTION": level.value},
    )
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="prot")
        s3.put_object(Bucket="prot", Key="d/x.bin", Body=DATA)
        with Client(config=cluster.client_config("admin")) as c:
            c.mount("/prot", "s3://prot/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
            assert c.read(PATH) == DATA
        yield cluster, level
    finally:
        cluster.down()


def test_workers_advertise_the_level_and_readers_get_their_blocks_over_the_data_port(
    protected: tuple[LocalCluster, Level],
) -> None:
    cluster, level = protected
    with Client(config=_remote_reader(cluster)) as c:
        assert {w.data_protection for w in c.workers()} == {level.value}
        assert c.read(PATH) == DATA
        assert c.read(PATH, BLOCK - 7, BLOCK + 20) == DATA[BLOCK - 7 : 2 * BLOCK + 13]
        assert c.aio.data_port_bytes == len(DATA) + BLOCK + 20


def test_blocks_of_many_sealing_pieces_are_read_byte_exact(
    protected: tuple[LocalCluster, Level],
) -> None:
    # 1 MiB + 1 blocks: each goes through the seal in several pieces on both sides, the
    # last one short; the file's last block is shorter than one piece.
    cluster, _ = protected
    big_block = (1 << 20) + 1
    data = os.urandom(2 * big_block + 5000)
    cluster.s3_client().put_object(Bucket="prot", Key="big/y.bin", Body=data)
    with Client(config=cluster.client_config("admin")) as c:
        c.mount(
            "/prot-big", "s3://prot/big/", endpoint_url=cluster.s3_endpoint, block_size=big_block
        )
    with Client(config=_remote_reader(cluster)) as c:
        assert c.read("/prot-big/y.bin") == data  # fetched by the workers, then sent
        assert c.read("/prot-big/y.bin") == data  # held: from their block files
        assert c.read("/prot-big/y.bin", 300_000, big_block) == data[300_000 : 300_000 + big_block]
        assert c.aio.data_port_bytes >= 2 * len(data)


def test_a_block_changed_in_a_workers_memory_is_dropped_and_fetched_again_at_integrity(
    protected: tuple[LocalCluster, Level],
) -> None:
    # At integrity the reader checks the tag, not a CRC32C of its own: the worker checks
    # the CRC32C the block landed with as it seals it.
    cluster = _at_integrity(protected)
    block = 1 << 20
    data = os.urandom(2 * block + 777)  # blocks sent in pieces, and one sent in one write
    cluster.s3_client().put_object(Bucket="prot", Key="rot/z.bin", Body=data)
    with Client(config=cluster.client_config("admin")) as c:
        c.mount("/prot-rot", "s3://prot/rot/", endpoint_url=cluster.s3_endpoint, block_size=block)
    config = _remote_reader(cluster)
    with Client(config=config) as c:
        assert c.read("/prot-rot/z.bin") == data
        inode = c.stat("/prot-rot/z.bin")
        workers = {w.shm_dir: w for w in c.workers()}
    reader = DataPortReader(config, Hedges(config, PenaltyBox(config.worker_penalty_s)))
    try:
        for index in range(3):
            start, end = index * block, min(len(data), (index + 1) * block)
            (path,) = cluster.shm_root.rglob(shm_block_name(inode.file_id, index))
            with open(path, "r+b") as f:  # as a bad DIMM or a stray write would
                f.seek(HEADER_SIZE + 100)
                f.write(bytes([data[start + 100] ^ 0xFF]))
            holder = workers[str(path.parent)]
            out = memoryview(bytearray(end - start))
            assert reader.read_into(holder, inode, index, 0, out).name != "READ"
            assert not path.exists()  # dropped: the next read fetches it again
    finally:
        reader.close()
    with Client(config=config) as c:
        assert c.read("/prot-rot/z.bin") == data


def _at_integrity(protected: tuple[LocalCluster, Level]) -> LocalCluster:
    cluster, level = protected
    if level is not Level.INTEGRITY:
        pytest.skip("only the integrity level seals responses")
    return cluster


def _remote_reader(cluster: LocalCluster) -> ClientConfig:
    # As on another host: no short-circuit reads of the workers' block files.
    return cluster.client_config("reader", short_circuit=False)


def _response(sock: socket.socket) -> tuple[wire.ResponseHeader, bytes]:
    header = wire.ResponseHeader.decode(_exactly(sock, wire.RESPONSE_HEADER.size))
    return header, _exactly(sock, header.length)


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def _worker(cluster: LocalCluster) -> WorkerRecord:
    with Client(config=cluster.client_config("admin")) as c:
        return c.workers()[0]


def _plain(worker: WorkerRecord) -> socket.socket:
    host, _, port = worker.data_address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=10)


def test_a_read_before_a_proof_gets_no_byte_and_a_token_in_clear_is_refused(
    protected: tuple[LocalCluster, Level],
) -> None:
    cluster, _ = protected
    with Client(config=cluster.client_config("admin")) as c:
        inode = c.stat(PATH)
    worker = _worker(cluster)
    with _plain(worker) as sock:
        sock.sendall(wire.encode_request(block_request(inode, 0).SerializeToString()))
        header, body = _response(sock)
        assert header.status == code_value(Unauthenticated("")) and DATA[:100] not in body
        with contextlib.suppress(ConnectionResetError):  # its body unread: perhaps a reset
            assert sock.recv(1) == b""  # closed
    token = cluster.security("reader").presented_token()
    with _plain(worker) as sock:
        sock.sendall(wire.encode_auth(token))
        header, body = _response(sock)
        assert header.status != 0 and b"in clear" in body


def test_the_hello_names_the_level_and_a_wrong_proof_is_refused(
    protected: tuple[LocalCluster, Level],
) -> None:
    cluster, level = protected
    with _plain(_worker(cluster)) as sock:
        sock.sendall(wire.encode_frame(wire.HELLO, os.urandom(NONCE_BYTES)))
        header, body = _response(sock)
        assert header.status == 0 and body[0] == level.code and len(body) == 1 + NONCE_BYTES
        sock.sendall(wire.encode_frame(wire.PROOF, os.urandom(48)))
        header, body = _response(sock)
        assert header.status == code_value(Unauthenticated("")) and b"proof" in body


def test_a_client_whose_token_is_not_the_clusters_gets_the_error_from_the_full_path(
    protected: tuple[LocalCluster, Level], tmp_path: Path
) -> None:
    cluster, _ = protected
    token = tmp_path / "wrong.token"
    token.write_text("rsv_not-a-token-of-this-cluster\n")
    ca = cluster.security("reader").tls_ca
    settings = SecuritySettings(tls_ca=ca, token_file=str(token))
    with Client(config=ClientConfig(master=cluster.master_address, security=settings)) as c:
        with pytest.raises(Unauthenticated):
            c.read(PATH)
        assert c.aio.data_port_bytes == 0


class _Tamperer(DataPortRelay):
    """A relay in front of a data port that changes one byte of the first block it
    carries to the reader and makes the block's CRC32C match the change, as an attacker
    on the path would: only a keyed seal can tell."""

    def __init__(self, target: str) -> None:
        self.changed = 0
        super().__init__(target)

    def answers(self, worker: socket.socket, reader: socket.socket) -> None:
        try:
            while True:
                raw = _exactly(worker, wire.RESPONSE_HEADER.size)
                header = wire.ResponseHeader.decode(raw)
                body = bytearray(_exactly(worker, header.length))
                if header.status == 0 and header.length >= BLOCK and not self.changed:
                    body[100] ^= 0x01
                    raw = wire.ResponseHeader(0, checksum(bytes(body)), header.length).encode()
                    self.changed += 1
                reader.sendall(raw + body)
                if header.length >= BLOCK or header.status != 0:
                    reader.sendall(_exactly(worker, 16))  # the seal, passed on as it is
        except (OSError, ConnectionError):
            reader.close()


def test_a_block_changed_on_the_way_with_a_matching_checksum_is_refused_at_integrity(
    protected: tuple[LocalCluster, Level],
) -> None:
    cluster = _at_integrity(protected)
    worker = _worker(cluster)
    relay = _Tamperer(worker.data_address)
    try:
        config = _remote_reader(cluster)
        with Client(config=config) as c:
            inode = c.stat(PATH)
        reader = DataPortReader(config, Hedges(config, PenaltyBox(config.worker_penalty_s)))
        via_relay = WorkerRecord(
            worker.id,
            worker.address,
            data_address=relay.address,
            data_protection=worker.data_protection,
        )
        first = memoryview(bytearray(BLOCK))
        assert reader.read_into(via_relay, inode, 0, 0, first).name != "READ"
        assert relay.changed == 1 and reader.tampered == 1
        second = memoryview(bytearray(BLOCK))  # the next block, untouched, is read
        assert reader.read_into(via_relay, inode, 1, 0, second).name == "READ"
        assert bytes(second) == DATA[BLOCK : 2 * BLOCK]
        reader.close()
    finally:
        relay.close()
