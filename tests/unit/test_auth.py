"""Tokens with roles, checked by one interceptor; TLS transport. In-process gRPC server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import grpc.aio
import pytest

from reservoir.common.errors import InvalidArgument, PermissionDenied, Unauthenticated
from reservoir.common.rpc import CHANNEL_OPTIONS
from reservoir.common.security import SecuritySettings, Transport
from reservoir.common.serving.auth import (
    AuthInterceptor,
    TokenTable,
    authorize,
    new_token,
    token_hash,
)
from reservoir.local import pki
from reservoir.v1 import master_pb2

MOUNT = "/reservoir.v1.MasterService/Mount"
STAT = "/reservoir.v1.MasterService/GetFileInfo"
REPORT = "/reservoir.v1.MasterService/ReportBlocks"


def _table(**tokens: tuple[str, str]) -> TokenTable:
    return TokenTable.parse(
        f"{role} {token_hash(t)} {subject}" for t, (role, subject) in tokens.items()
    )


def _md(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def test_no_token_and_an_unknown_one_are_unauthenticated_with_different_messages() -> None:
    table = _table(a=("admin", ""))
    with pytest.raises(Unauthenticated, match="^no token given: set RESERVOIR_TOKEN"):
        authorize(table, STAT, ())
    with pytest.raises(Unauthenticated, match="^the token was refused"):
        authorize(table, STAT, _md("not-a-token"))


def test_a_reader_may_stat_but_not_mount() -> None:
    table = _table(r=("reader", ""))
    assert authorize(table, STAT, _md("r")) is not None
    with pytest.raises(PermissionDenied, match="needs the admin role") as caught:
        authorize(table, MOUNT, _md("r"))
    assert not isinstance(caught.value, Unauthenticated)
    assert "Mount" not in str(caught.value)  # the RPC's name means nothing to its caller


def test_writes_take_a_writer_or_an_admin_and_a_writer_may_read_but_not_mount() -> None:
    table = _table(w=("writer", ""), a=("admin", ""), r=("reader", ""), k=("worker", "w1"))
    writes = [
        "/reservoir.v1.MasterService/BeginWrite",
        "/reservoir.v1.MasterService/PublishWrite",
        "/reservoir.v1.MasterService/Rename",
        "/reservoir.v1.MasterService/Remove",
        "/reservoir.v1.WorkerService/WritePart",
        "/reservoir.v1.WorkerService/CommitBlocks",
    ]
    for method in writes:
        assert authorize(table, method, _md("w")) is not None
        assert authorize(table, method, _md("a")) is not None
        with pytest.raises(PermissionDenied, match="^writing needs the writer role"):
            authorize(table, method, _md("r"))
        with pytest.raises(PermissionDenied):
            authorize(table, method, _md("k"))  # a worker writes nothing through another
    assert authorize(table, STAT, _md("w")) is not None
    with pytest.raises(PermissionDenied):
        authorize(table, MOUNT, _md("w"))


def test_health_checks_need_no_token() -> None:
    assert authorize(_table(), "/grpc.health.v1.Health/Check", ()) is None


def test_an_unknown_method_is_refused_even_to_an_admin() -> None:
    with pytest.raises(PermissionDenied):
        authorize(_table(a=("admin", "")), "/reservoir.v1.MasterService/DropEverything", _md("a"))


def test_a_tokens_file_with_a_bad_line_is_refused_naming_the_line() -> None:
    with pytest.raises(InvalidArgument, match="line 2"):
        TokenTable.parse(["# comment", "superuser abc"])


def test_tokens_are_long_and_random() -> None:
    a, b = new_token(), new_token()
    assert a != b and len(a) > 40


class _Echo:
    """A master-shaped service: Mount, GetFileInfo and ReportBlocks answer empty."""

    async def ok(self, request: object, context: grpc.aio.ServicerContext) -> bytes:
        return b""

    def handler(self) -> grpc.GenericRpcHandler:
        def handler(method: str) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                self.ok,
                request_deserializer=master_pb2.ReportBlocksRequest.FromString,
                response_serializer=lambda b: b,
            )

        return grpc.method_handlers_generic_handler(
            "reservoir.v1.MasterService",
            {m: handler(m) for m in ("Mount", "GetFileInfo", "ReportBlocks")},
        )


def test_tls_server_checks_roles_and_worker_subjects(tmp_path: Path) -> None:
    creds = pki.create(tmp_path / "pki", ["worker1"])
    table = TokenTable.load(str(creds.tokens_file))
    server_side = Transport(
        SecuritySettings(
            tls_cert=str(creds.cert),
            tls_key=str(creds.key),
            auth_tokens_file=str(creds.tokens_file),
        ),
        CHANNEL_OPTIONS,
    )

    def client(name: str | None) -> Transport:
        token = str(creds.token(name)) if name else ""
        return Transport(SecuritySettings(tls_ca=str(creds.ca), token_file=token), CHANNEL_OPTIONS)

    async def scenario() -> dict[str, grpc.StatusCode]:
        server = grpc.aio.server(interceptors=[AuthInterceptor(table)])
        server.add_generic_rpc_handlers([_Echo().handler()])
        credentials = server_side.server_credentials()
        assert credentials is not None
        port = server.add_secure_port("127.0.0.1:0", credentials)
        await server.start()
        results: dict[str, grpc.StatusCode] = {}
        try:
            for who, method, worker_id in [
                (None, STAT, ""),
                ("reader", STAT, ""),
                ("reader", MOUNT, ""),
                ("admin", MOUNT, ""),
                ("worker1", REPORT, "worker1"),
                ("worker1", REPORT, "worker2"),
                ("reader", REPORT, "worker1"),
            ]:
                async with client(who).channel(f"127.0.0.1:{port}") as channel:
                    call = channel.unary_unary(
                        method,
                        request_serializer=master_pb2.ReportBlocksRequest.SerializeToString,
                        response_deserializer=lambda b: b,
                    )
                    try:
                        await call(master_pb2.ReportBlocksRequest(worker_id=worker_id), timeout=10)
                        code = grpc.StatusCode.OK
                    except grpc.aio.AioRpcError as exc:
                        code = exc.code()
                    results[f"{who} {method.rsplit('/', 1)[1]} {worker_id}".strip()] = code
        finally:
            await server.stop(None)
        return results

    assert asyncio.run(scenario()) == {
        "None GetFileInfo": grpc.StatusCode.UNAUTHENTICATED,
        "reader GetFileInfo": grpc.StatusCode.OK,
        "reader Mount": grpc.StatusCode.PERMISSION_DENIED,
        "admin Mount": grpc.StatusCode.OK,
        "worker1 ReportBlocks worker1": grpc.StatusCode.OK,
        "worker1 ReportBlocks worker2": grpc.StatusCode.PERMISSION_DENIED,
        "reader ReportBlocks worker1": grpc.StatusCode.PERMISSION_DENIED,
    }
    # The file the servers read holds hashes, never a token.
    text = creds.tokens_file.read_text()
    for name in ("admin", "reader", "master", "worker1"):
        assert creds.token(name).read_text().strip() not in text


def test_a_token_is_never_configured_without_tls() -> None:
    with pytest.raises(InvalidArgument, match="TLS"):
        Transport(SecuritySettings(token="secret"), CHANNEL_OPTIONS)


def test_a_plaintext_server_refuses_to_check_tokens(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="TLS"):
        Transport(SecuritySettings(auth_tokens_file="x"), CHANNEL_OPTIONS).server_credentials()


def test_mutual_tls_refuses_a_client_without_a_certificate(tmp_path: Path) -> None:
    creds = pki.create(tmp_path / "pki", [])
    server_side = Transport(
        SecuritySettings(
            tls_ca=str(creds.ca),
            tls_cert=str(creds.cert),
            tls_key=str(creds.key),
            tls_client_auth=True,
        ),
        CHANNEL_OPTIONS,
    )
    with_cert = Transport(
        SecuritySettings(tls_ca=str(creds.ca), tls_cert=str(creds.cert), tls_key=str(creds.key)),
        CHANNEL_OPTIONS,
    )
    without_cert = Transport(SecuritySettings(tls_ca=str(creds.ca)), CHANNEL_OPTIONS)

    async def scenario() -> list[grpc.StatusCode]:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([_Echo().handler()])
        credentials = server_side.server_credentials()
        assert credentials is not None
        port = server.add_secure_port("127.0.0.1:0", credentials)
        await server.start()
        codes = []
        try:
            for transport in (with_cert, without_cert):
                async with transport.channel(f"127.0.0.1:{port}") as channel:
                    call = channel.unary_unary(
                        STAT,
                        request_serializer=master_pb2.ReportBlocksRequest.SerializeToString,
                        response_deserializer=lambda b: b,
                    )
                    try:
                        await call(master_pb2.ReportBlocksRequest(), timeout=5)
                        codes.append(grpc.StatusCode.OK)
                    except grpc.aio.AioRpcError as exc:
                        codes.append(exc.code())
        finally:
            await server.stop(None)
        return codes

    assert asyncio.run(scenario()) == [grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE]


def test_only_the_cluster_may_have_a_worker_copy_blocks_under_another_file() -> None:
    """Keeping a block under another file's id would serve its bytes for that file: only
    the master (a worker-role token) asks, after a rename."""
    table = _table(m=("worker", "master"), a=("admin", ""), w=("writer", ""))
    method = "/reservoir.v1.WorkerService/CopyBlocks"
    assert authorize(table, method, _md("m")) is not None
    for caller in ("a", "w"):
        with pytest.raises(PermissionDenied):
            authorize(table, method, _md(caller))
