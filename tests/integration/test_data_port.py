"""Workers' data ports: block bytes over TCP (TLS on a secure cluster), read by the
blocking client in its own thread, and what a worker does with requests that are not
right. The shared cluster is secure when the run is (RESERVOIR_TEST_SECURE), so these run
both ways; the tests of a secure port's refusals have a secure cluster of their own."""

from __future__ import annotations

import os
import socket
import ssl
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.common.blocks import block_transfer as wire
from reservoir.common.blocks.block_file import checksum
from reservoir.common.config import ClientConfig, SecuritySettings
from reservoir.common.errors import (
    InvalidArgument,
    IsADirectory,
    Unauthenticated,
    code_value,
)
from reservoir.common.models import WorkerRecord, block_request
from reservoir.common.security import data_port_client_context, tls_server_name
from reservoir.local.cluster import LocalCluster
from tests.conftest import SECURE, new_mount_path
from tests.integration.test_metrics import scrape

BLOCK = 64 * 1024
DATA = os.urandom(3 * BLOCK + 1234)


@pytest.fixture
def mounted(cluster: LocalCluster, bucket: str) -> Iterator[tuple[Client, str]]:
    cluster.s3_client().put_object(Bucket=bucket, Key="d/x.bin", Body=DATA)
    cluster.s3_client().put_object(Bucket=bucket, Key="d/small", Body=b"tiny file")
    root = new_mount_path()
    with Client(cluster.master_address) as c:
        c.mount(root, f"s3://{bucket}/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
        assert c.read(f"{root}/x.bin") == DATA  # cold: the full path, the workers fetch
        yield c, root


def _connect(
    worker: WorkerRecord, settings: SecuritySettings | None = None, *, authenticate: bool = True
) -> socket.socket:
    """A connection to `worker`'s data port as a client of these settings (the run's by
    default) has it: TLS when they have a CA, the token presented when they have one."""
    settings = settings or SecuritySettings.from_env()
    host, _, port = worker.data_address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    context = data_port_client_context(settings)
    if context is None:
        return sock
    tls = context.wrap_socket(sock, server_hostname=tls_server_name(settings, host))
    if authenticate and settings.presented_token():
        tls.sendall(wire.encode_auth(settings.presented_token()))
        header, body = _response(tls)
        assert (header.status, body) == (0, b"")
    return tls


def _receive(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def _response(sock: socket.socket) -> tuple[wire.ResponseHeader, bytes]:
    header = wire.ResponseHeader.decode(_receive(sock, wire.RESPONSE_HEADER.size))
    return header, _receive(sock, header.length)


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLEOFError):
        return True


def _data_port_requests(cluster: LocalCluster, code: str = "OK") -> float:
    """Requests the cluster's workers' data ports answered with `code`."""
    key = ("reservoir_worker_data_port_requests_total", (("code", code),))
    return sum(
        scrape(cluster, name).get(key, 0.0)
        for name in cluster.processes
        if name.startswith("worker")
    )


def test_every_worker_advertises_a_data_port(client: Client) -> None:
    workers = client.workers()
    assert workers and all(w.data_address for w in workers)
    assert all(w.data_address != w.address for w in workers)


def test_blocking_reads_come_over_the_data_port_byte_exact(mounted: tuple[Client, str]) -> None:
    c, root = mounted
    before = c.aio.data_port_bytes
    assert c.read(f"{root}/x.bin") == DATA
    assert c.read(f"{root}/x.bin", BLOCK - 7, BLOCK + 20) == DATA[BLOCK - 7 : 2 * BLOCK + 13]
    assert c.read(f"{root}/small") == b"tiny file"
    with c.open(f"{root}/x.bin") as f:
        f.seek(5)
        buffer = bytearray(2 * BLOCK)
        assert f.readinto(buffer) == len(buffer)
        assert bytes(buffer) == DATA[5 : 5 + 2 * BLOCK]
        assert f.read() == DATA[5 + 2 * BLOCK :]
    # The whole file, the range, the small file, and the file from offset 5 (the buffered
    # reader fills its buffer with one raw read).
    expected = len(DATA) + BLOCK + 20 + len(b"tiny file") + len(DATA) - 5
    assert c.aio.data_port_bytes - before == expected


def test_a_range_is_answered_with_its_own_checksum(mounted: tuple[Client, str]) -> None:
    c, root = mounted
    inode = c.stat(f"{root}/x.bin")
    request = block_request(inode, 1, 100, 5000).SerializeToString()
    with _connect(c.workers()[0]) as sock:
        for _ in range(2):  # one connection, request after request
            sock.sendall(wire.encode_request(request))
            header, body = _response(sock)
            assert header.status == 0
            assert body == DATA[BLOCK + 100 : BLOCK + 5100]
            assert header.crc32c == checksum(body)


def test_a_frame_that_is_not_a_request_gets_invalid_argument_and_the_connection_closes(
    client: Client,
) -> None:
    with _connect(client.workers()[0]) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        header, body = _response(sock)
        assert header.status == code_value(InvalidArgument(""))
        assert b"magic" in body
        assert _closed(sock)


def test_an_oversized_request_is_refused_before_its_body_is_read(client: Client) -> None:
    with _connect(client.workers()[0]) as sock:
        sock.sendall(struct.pack("<4sB3xI", wire.MAGIC, wire.VERSION, 1 << 30))
        header, body = _response(sock)
        assert header.status == code_value(InvalidArgument(""))
        assert b"exceeds" in body
        assert _closed(sock)


def test_a_request_the_worker_cannot_serve_gets_its_error_and_the_connection_stays(
    mounted: tuple[Client, str],
) -> None:
    c, root = mounted
    inode = c.stat(f"{root}/x.bin")
    with _connect(c.workers()[0]) as sock:
        sock.sendall(wire.encode_request(b"\xff\xff\xff"))  # not a ReadBlockRequest
        header, body = _response(sock)
        assert header.status == code_value(InvalidArgument(""))
        bad = block_request(inode, 0)
        bad.block_size = BLOCK + 1  # geometry other than the file's
        bad.index = 10**6
        sock.sendall(wire.encode_request(bad.SerializeToString()))
        header, body = _response(sock)
        assert header.status != 0 and body
        sock.sendall(wire.encode_request(block_request(inode, 0).SerializeToString()))
        header, body = _response(sock)
        assert header.status == 0 and body == DATA[:BLOCK]


def test_a_reader_that_hangs_up_mid_block_leaves_the_worker_serving(
    mounted: tuple[Client, str],
) -> None:
    c, root = mounted
    inode = c.stat(f"{root}/x.bin")
    for worker in c.workers():
        with _connect(worker) as sock:
            sock.sendall(wire.encode_request(block_request(inode, 0).SerializeToString()))
            _receive(sock, wire.RESPONSE_HEADER.size + 10)
    assert c.read(f"{root}/x.bin") == DATA


def test_a_client_with_the_data_port_off_reads_over_grpc(
    cluster: LocalCluster, mounted: tuple[Client, str]
) -> None:
    _, root = mounted
    from reservoir.common import config as cfg

    config = cfg.ClientConfig(master=cluster.master_address, data_port=False)
    with Client(config=config) as c:
        c.ls(root)
        assert c.read(f"{root}/x.bin") == DATA
        assert c.aio.data_port_bytes == 0


def test_pipelined_requests_are_answered_in_order(mounted: tuple[Client, str]) -> None:
    c, root = mounted
    inode = c.stat(f"{root}/x.bin")
    frames = [
        wire.encode_request(block_request(inode, index, 3, 1000).SerializeToString())
        for index in (2, 0, 3, 1)
    ]
    with _connect(c.workers()[0]) as sock:
        sock.sendall(b"".join(frames))
        for index in (2, 0, 3, 1):
            header, body = _response(sock)
            assert header.status == 0
            start = index * BLOCK + 3
            assert body == DATA[start : start + min(1000, len(DATA) - start)]


def test_read_many_reads_small_files_over_data_ports_and_the_rest_the_full_way(
    cluster: LocalCluster, bucket: str
) -> None:
    s3 = cluster.s3_client()
    files = {f"d/s{i}": os.urandom(100 + i * 37) for i in range(40)}
    files["d/empty"] = b""
    files["d/big"] = os.urandom(2 * BLOCK + 3)
    for key, data in files.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    root = new_mount_path()
    with Client(cluster.master_address) as c:
        c.mount(root, f"s3://{bucket}/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
        names = sorted(files, reverse=True)
        paths = [f"{root}/{name[2:]}" for name in names]
        for _ in range(2):  # cold (the workers fetch), then warm
            before = c.aio.data_port_bytes
            assert c.read_many(paths) == [files[name] for name in names]
            small = sum(len(files[n]) for n in names if n.startswith("d/s"))
            assert c.aio.data_port_bytes - before >= small
        with pytest.raises(IsADirectory):
            c.read_many([paths[0], root])
        with pytest.raises(FileNotFoundError):
            c.read_many([paths[0], f"{root}/nope"])


# ---- a secure cluster's data ports: TLS, and a token before any byte ------------------------


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, str]]:
    """A `--secure` cluster (TLS, tokens) with DATA in a mount, read once (cold)."""
    if SECURE:  # the run's clusters are all secure already, with the run's credentials
        cluster = LocalCluster.up(tmp_path_factory.mktemp("secure-data-port"), workers=2)
    else:
        cluster = LocalCluster.up(
            tmp_path_factory.mktemp("secure-data-port"), workers=2, secure=True
        )
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="secdp")
        s3.put_object(Bucket="secdp", Key="d/x.bin", Body=DATA)
        with Client(config=cluster.client_config("admin")) as c:
            c.mount("/secdp", "s3://secdp/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
            assert c.read("/secdp/x.bin") == DATA
        yield cluster, "/secdp/x.bin"
    finally:
        cluster.down()


def _tls_only(cluster: LocalCluster) -> SecuritySettings:
    creds = cluster.credentials
    assert creds is not None
    return SecuritySettings(tls_ca=str(creds.ca))


def test_a_secure_cluster_reads_over_its_tls_data_ports_byte_exact(
    secure: tuple[LocalCluster, str],
) -> None:
    cluster, path = secure
    with Client(config=cluster.client_config("reader")) as c:
        assert all(w.data_address for w in c.workers())
        served = _data_port_requests(cluster)
        assert c.read(path) == DATA
        assert c.read(path, BLOCK - 7, BLOCK + 20) == DATA[BLOCK - 7 : 2 * BLOCK + 13]
        assert c.aio.data_port_bytes == len(DATA) + BLOCK + 20
    # Four blocks, then the three the range spans: each a request a data port answered.
    assert _data_port_requests(cluster) - served == 4 + 3


def test_plain_tcp_to_a_secure_data_port_gets_no_byte_of_a_block(
    secure: tuple[LocalCluster, str],
) -> None:
    cluster, path = secure
    with Client(config=cluster.client_config("admin")) as c:
        inode = c.stat(path)
        worker = c.workers()[0]
    # The old protocol, in clear, as a client without TLS would speak it.
    with _connect(worker, SecuritySettings()) as sock:
        sock.sendall(wire.encode_request(block_request(inode, 0).SerializeToString()))
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass  # closed with our request unread: a reset, which is refusal too
    # Closed with a TLS alert at most: no response frame, nothing of the block.
    assert received == b"" or received[0] == 0x15  # a TLS alert record
    assert len(received) < wire.RESPONSE_HEADER.size + 64
    assert DATA[:32] not in received


def test_tls_without_a_token_gets_unauthenticated_and_the_connection_closes(
    secure: tuple[LocalCluster, str],
) -> None:
    cluster, path = secure
    with Client(config=cluster.client_config("admin")) as c:
        inode = c.stat(path)
        worker = c.workers()[0]
    with _connect(worker, _tls_only(cluster)) as sock:
        sock.sendall(wire.encode_request(block_request(inode, 0).SerializeToString()))
        header, body = _response(sock)
        assert header.status == code_value(Unauthenticated(""))
        assert b"token" in body and DATA[:32] not in body
        assert _closed(sock)


def test_a_bad_token_is_refused_and_nothing_after_it_is_served(
    secure: tuple[LocalCluster, str],
) -> None:
    cluster, path = secure
    with Client(config=cluster.client_config("admin")) as c:
        inode = c.stat(path)
        worker = c.workers()[0]
    refused = _data_port_requests(cluster, "UNAUTHENTICATED")
    with _connect(worker, _tls_only(cluster)) as sock:
        read = wire.encode_request(block_request(inode, 0).SerializeToString())
        sock.sendall(wire.encode_auth("rsv_not-a-token-of-this-cluster") + read)
        header, _ = _response(sock)
        assert header.status == code_value(Unauthenticated(""))
        assert _closed(sock)
    assert _data_port_requests(cluster, "UNAUTHENTICATED") - refused == 1


def test_a_reader_token_is_accepted_once_and_the_connection_serves_many_reads(
    secure: tuple[LocalCluster, str],
) -> None:
    cluster, path = secure
    with Client(config=cluster.client_config("admin")) as c:
        inode = c.stat(path)
        worker = c.workers()[0]
    with _connect(worker, cluster.security("reader")) as sock:
        for index in (0, 3, 1):
            sock.sendall(wire.encode_request(block_request(inode, index).SerializeToString()))
            header, body = _response(sock)
            assert header.status == 0
            assert body == DATA[index * BLOCK : (index + 1) * BLOCK]
            assert header.crc32c == checksum(body)


def test_a_client_whose_token_the_data_port_refuses_gets_the_error_from_the_full_path(
    secure: tuple[LocalCluster, str], tmp_path: Path
) -> None:
    cluster, path = secure
    token = tmp_path / "wrong.token"
    token.write_text("rsv_not-a-token-of-this-cluster\n")
    settings = SecuritySettings(tls_ca=_tls_only(cluster).tls_ca, token_file=str(token))
    with Client(config=ClientConfig(master=cluster.master_address, security=settings)) as c:
        with pytest.raises(Unauthenticated):
            c.read(path)
        assert c.aio.data_port_bytes == 0
