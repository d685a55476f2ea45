"""Random and mutated messages to every RPC of the master and a worker: every answer is a
deliberate gRPC status (never UNKNOWN or INTERNAL), and both servers still answer a
health check and a real read afterwards."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reservoir.client import Client
from reservoir.common.config import SecuritySettings
from reservoir.common.rpc import CHANNEL_OPTIONS
from reservoir.common.security import Transport
from reservoir.local.cluster import LocalCluster
from reservoir.v1 import master_pb2, worker_pb2
from tests.conftest import SECURE, channel

BAD = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
MASTER = master_pb2.DESCRIPTOR.services_by_name["MasterService"]
WORKER = worker_pb2.DESCRIPTOR.services_by_name["WorkerService"]
# Examples per RPC; the fuzzed calls run against this module's own cluster.
EXAMPLES = int(os.environ.get("RESERVOIR_TEST_FUZZ_EXAMPLES", "100"))


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(tmp_path_factory.mktemp("fuzz"), workers=1, lease_ttl=3)
    try:
        # Only this cluster's own S3 server may be mounted: a fuzzed Mount never makes
        # the master contact anything else.
        cluster.settings["env"]["RESERVOIR_ALLOWED_ENDPOINTS"] = cluster.s3_endpoint
        cluster.stop("master")
        cluster.start_master()
        yield cluster
    finally:
        cluster.down()


def _methods() -> list[tuple[str, str, Any, bool]]:
    found = []
    for service, kind in ((MASTER, "master"), (WORKER, "worker")):
        for method in service.methods:
            module = master_pb2 if kind == "master" else worker_pb2
            request_cls = getattr(module, method.input_type.name, None)
            if request_cls is None:
                from reservoir.v1 import common_pb2

                request_cls = getattr(common_pb2, method.input_type.name)
            found.append(
                (kind, f"/{service.full_name}/{method.name}", request_cls, method.server_streaming)
            )
    return found


def _value(field: descriptor.FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    t = field.type
    if t == descriptor.FieldDescriptor.TYPE_STRING:
        return st.one_of(
            st.text(max_size=40),
            st.sampled_from(["/", "/t", "/../etc", "s3://b/", "file:///etc", "\x00", "/a" * 300]),
        )
    if t == descriptor.FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    if t == descriptor.FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (descriptor.FieldDescriptor.TYPE_INT32, descriptor.FieldDescriptor.TYPE_ENUM):
        return st.integers(-(2**31), 2**31 - 1)
    if t in (descriptor.FieldDescriptor.TYPE_FIXED32, descriptor.FieldDescriptor.TYPE_UINT32):
        return st.integers(0, 2**32 - 1)
    if t == descriptor.FieldDescriptor.TYPE_MESSAGE:
        return _message(field.message_type._concrete_class, depth + 1)
    return st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 1 << 40]))


def _message(cls: type[Message], depth: int = 0) -> st.SearchStrategy[Message]:
    if depth > 2:
        return st.just(cls())
    fields = {}
    for field in cls.DESCRIPTOR.fields:
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            key, item = entry.fields_by_name["key"], entry.fields_by_name["value"]
            fields[field.name] = st.one_of(
                st.none(), st.dictionaries(_value(key, depth), _value(item, depth), max_size=3)
            )
            continue
        value = _value(field, depth)
        if field.is_repeated:
            value = st.lists(value, max_size=3)  # type: ignore[assignment]
        fields[field.name] = st.one_of(st.none(), value)

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        message = cls()
        for name, strategy in fields.items():
            value = draw(strategy)
            if value is None:
                continue
            target = getattr(message, name)
            try:
                if isinstance(value, list):
                    if value and isinstance(value[0], Message):
                        for item in value:
                            target.add().CopyFrom(item)
                    else:
                        target.extend(value)
                elif isinstance(value, dict):
                    target.update(value)
                elif isinstance(value, Message):
                    target.CopyFrom(value)
                else:
                    setattr(message, name, value)
            except (TypeError, ValueError):
                pass  # a value the field cannot hold: leave it unset
        return message

    return build()


def _payloads(cls: type[Message]) -> st.SearchStrategy[bytes]:
    valid = _message(cls).map(lambda m: m.SerializeToString())

    @st.composite
    def mutated(draw: st.DrawFn) -> bytes:
        raw = bytearray(draw(valid))
        for _ in range(draw(st.integers(1, 4))):
            if raw and draw(st.booleans()):
                raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
            else:
                raw.insert(draw(st.integers(0, len(raw))), draw(st.integers(0, 255)))
        if raw and draw(st.booleans()):
            del raw[draw(st.integers(0, len(raw) - 1)) :]
        return bytes(raw)

    return st.one_of(valid, mutated(), st.binary(max_size=256))


def _call(ch: grpc.Channel, method: str, streaming: bool, payload: bytes) -> grpc.StatusCode:
    make = ch.unary_stream if streaming else ch.unary_unary
    call = make(method, request_serializer=None, response_deserializer=None)
    try:
        result = call(payload, timeout=15)
        if streaming:
            for _ in result:
                pass
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


@pytest.mark.parametrize(
    ("kind", "method", "request_cls", "streaming"),
    _methods(),
    ids=[m[1].rsplit("/", 1)[1] for m in _methods()],
)
def test_fuzzed_requests_get_deliberate_statuses(
    fuzz_cluster: LocalCluster, kind: str, method: str, request_cls: Any, streaming: bool
) -> None:
    with Client(fuzz_cluster.master_address) as c:
        address = fuzz_cluster.master_address if kind == "master" else c.workers()[0].address
    with channel(address) as ch:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
            database=None,
        )
        @given(_payloads(request_cls))
        def one(payload: bytes) -> None:
            code = _call(ch, method, streaming, payload)
            assert code not in BAD, f"{method} answered {code} to {payload!r}"

        one()
        if SECURE:
            # Without a token every call is refused before its bytes are even decoded.
            tls_only = SecuritySettings(tls_ca=os.environ["RESERVOIR_TLS_CA"])
            with Transport(tls_only, CHANNEL_OPTIONS).sync_channel(address) as anonymous:

                @settings(
                    max_examples=max(10, EXAMPLES // 4),
                    deadline=None,
                    suppress_health_check=[HealthCheck.too_slow],
                    database=None,
                )
                @given(_payloads(request_cls))
                def unauthenticated(payload: bytes) -> None:
                    code = _call(anonymous, method, streaming, payload)
                    assert code == grpc.StatusCode.UNAUTHENTICATED, f"{method}: {code}"

                unauthenticated()
        health = health_pb2_grpc.HealthStub(ch)
        answer = health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_after_fuzzing_both_servers_still_serve_a_real_read(fuzz_cluster: LocalCluster) -> None:
    s3 = fuzz_cluster.s3_client()
    s3.create_bucket(Bucket="after-fuzz")
    data = os.urandom(300_000)
    s3.put_object(Bucket="after-fuzz", Key="d/f", Body=data)
    with Client(fuzz_cluster.master_address) as c:
        c.mount("/after-fuzz", "s3://after-fuzz/d/", endpoint_url=fuzz_cluster.s3_endpoint)
        assert c.read("/after-fuzz/f") == data
        assert c.read_many(["/after-fuzz/f"]) == [data]
