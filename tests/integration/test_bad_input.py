"""Bad input gets a clear error with the right gRPC status; nothing hangs."""

from __future__ import annotations

import time

import grpc
import pytest

from reservoir.client import Client
from reservoir.common import errors, worker_methods
from reservoir.common.config import ClientConfig
from reservoir.common.models import file_id_for
from reservoir.local.cluster import LocalCluster, free_port
from reservoir.v1 import master_pb2, master_pb2_grpc, worker_pb2
from tests.conftest import channel, new_mount_path


def _raw_status(cluster: LocalCluster, path: str) -> grpc.StatusCode:
    with channel(cluster.master_address) as ch:
        stub = master_pb2_grpc.MasterServiceStub(ch)
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetFileInfo(master_pb2.GetFileInfoRequest(path=path), timeout=5)
        return caught.value.code()  # type: ignore[no-any-return]


def test_path_outside_every_mount_is_not_found(cluster: LocalCluster, client: Client) -> None:
    with pytest.raises(FileNotFoundError):
        client.stat("/no/such/mount/file")
    assert _raw_status(cluster, "/no/such/mount/file") == grpc.StatusCode.NOT_FOUND


def test_missing_object_under_a_mount_is_not_found(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    root = new_mount_path()
    client.mount(root, f"s3://{bucket}/x/", endpoint_url=cluster.s3_endpoint)
    with pytest.raises(FileNotFoundError):
        client.read(f"{root}/missing.bin")
    assert _raw_status(cluster, f"{root}/missing.bin") == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("bad", ["/a/../b", "/a//b", "/a/\x00b", "relative/path", "/a/./b"])
def test_malformed_paths_are_invalid_argument(
    cluster: LocalCluster, client: Client, bad: str
) -> None:
    with pytest.raises(ValueError):
        client.stat(bad)
    assert _raw_status(cluster, bad) == grpc.StatusCode.INVALID_ARGUMENT


def test_reading_a_directory_is_refused(cluster: LocalCluster, bucket: str, client: Client) -> None:
    cluster.s3_client().put_object(Bucket=bucket, Key="d/sub/x", Body=b"1")
    root = new_mount_path()
    client.mount(root, f"s3://{bucket}/d/", endpoint_url=cluster.s3_endpoint)
    with pytest.raises(IsADirectoryError):
        client.read(f"{root}/sub")
    with pytest.raises(NotADirectoryError):
        client.ls(f"{root}/sub/x")


@pytest.mark.parametrize("uri", ["s3://", "s3://UPPER_case/x", "ftp://host/x", "not a uri"])
def test_bad_under_store_uri_is_refused_at_mount(
    cluster: LocalCluster, client: Client, uri: str
) -> None:
    with pytest.raises(errors.InvalidArgument):
        client.mount(new_mount_path(), uri, endpoint_url=cluster.s3_endpoint)


def test_missing_bucket_is_refused_at_mount(cluster: LocalCluster, client: Client) -> None:
    with pytest.raises(FileNotFoundError):
        client.mount(new_mount_path(), "s3://no-such-bucket-xyz/", endpoint_url=cluster.s3_endpoint)


def test_unreachable_endpoint_fails_mount_quickly_and_clearly(client: Client) -> None:
    start = time.monotonic()
    with pytest.raises(errors.Unavailable, match="cannot connect"):
        client.mount(
            new_mount_path(), "s3://bucket/x/", endpoint_url=f"http://127.0.0.1:{free_port()}"
        )
    assert time.monotonic() - start < 10


def test_mount_over_an_existing_mount_is_refused(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    root = new_mount_path()
    client.mount(root, f"s3://{bucket}/a/", endpoint_url=cluster.s3_endpoint)
    with pytest.raises(FileExistsError):
        client.mount(root, f"s3://{bucket}/b/", endpoint_url=cluster.s3_endpoint)
    with pytest.raises(errors.InvalidArgument):
        client.mount(root + "/nested", f"s3://{bucket}/b/", endpoint_url=cluster.s3_endpoint)
    with pytest.raises(FileNotFoundError):
        client.unmount(root + "/never-mounted")


def test_unreachable_master_fails_within_the_deadline() -> None:
    config = ClientConfig(master=f"127.0.0.1:{free_port()}", rpc_timeout_s=1.0)
    start = time.monotonic()
    with Client(config=config) as c, pytest.raises(errors.Unavailable):
        c.stat("/anything")
    assert time.monotonic() - start < 5


def test_worker_refuses_a_block_request_whose_identity_does_not_match(
    cluster: LocalCluster, client: Client
) -> None:
    worker = client.workers()[0]
    request = worker_pb2.ReadBlockRequest(
        file_id="0" * 32,
        index=0,
        offset=0,
        length=-1,
        ufs_uri="s3://b/k",
        etag="e",
        file_size=10,
        block_size=4096,
        mount_path="/t/x",
    )
    with channel(worker.address) as ch:
        call = ch.unary_stream(
            worker_methods.READ_BLOCK,
            request_serializer=worker_pb2.ReadBlockRequest.SerializeToString,
            response_deserializer=worker_pb2.BlockChunk.FromString,
        )
        with pytest.raises(grpc.RpcError) as caught:
            list(call(request, timeout=5))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_small_read_larger_than_the_workers_limit_is_refused_before_any_fetch(
    cluster: LocalCluster, client: Client
) -> None:
    worker = client.workers()[0]
    size = 8 * 1024 * 1024  # one block, above the 4 MiB ReadSmall limit
    request = worker_pb2.ReadBlockRequest(
        file_id=file_id_for("s3://nowhere/k", "e", size, size),
        index=0,
        offset=0,
        length=-1,
        ufs_uri="s3://nowhere/k",
        etag="e",
        file_size=size,
        block_size=size,
        mount_path="/t",
    )
    with channel(worker.address) as ch:
        call = ch.unary_unary(
            worker_methods.READ_SMALL,
            request_serializer=worker_pb2.ReadBlockRequest.SerializeToString,
            response_deserializer=worker_pb2.BlockPayload.FromString,
        )
        with pytest.raises(grpc.RpcError) as caught:
            call(request, timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ReadBlock" in (caught.value.details() or "")


def test_negative_offset_is_invalid_argument(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    with pytest.raises(ValueError):
        client.read("/t/whatever", offset=-1)


@pytest.mark.parametrize(
    "method",
    [
        "/reservoir.v1.MasterService/GetFileInfo",
        "/reservoir.v1.MasterService/Mount",
        "/reservoir.v1.MasterService/LoadMetadata",
        *worker_methods.READS,
    ],
)
def test_undecodable_requests_are_invalid_argument(
    cluster: LocalCluster, client: Client, method: str
) -> None:
    address = cluster.master_address if "Master" in method else client.workers()[0].address
    garbage = b"\xff\xff\xff\xff\x0f" + bytes(range(256))
    with channel(address) as ch:
        streaming = method.endswith(("ReadBlock", "ReadBlocks", "LoadMetadata"))
        make = ch.unary_stream if streaming else ch.unary_unary
        call = make(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as caught:
            result = call(garbage, timeout=10)
            if streaming:
                list(result)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "DecodeError" not in (caught.value.details() or "")
    assert client.workers()  # still serving


@pytest.mark.parametrize("size", [100 * 1024, 4 * 1024 * 1024], ids=["100KB", "4MiB"])
@pytest.mark.parametrize(
    ("method", "request_for"),
    [
        ("GetFileInfo", lambda p: master_pb2.GetFileInfoRequest(path=p)),
        ("GetFileInfos", lambda p: master_pb2.GetFileInfosRequest(paths=[p])),
        ("ListDirectory", lambda p: master_pb2.ListDirectoryRequest(path=p)),
        ("Mount", lambda p: master_pb2.MountRequest(path=p, uri="s3://bucket/x/")),
        ("Unmount", lambda p: master_pb2.UnmountRequest(path=p)),
        ("Report", lambda p: master_pb2.ReportRequest(path=p)),
        ("SubmitLoad", lambda p: master_pb2.SubmitLoadRequest(path=p)),
    ],
)
def test_huge_paths_are_invalid_argument_with_a_short_message(
    cluster: LocalCluster, method: str, request_for: object, size: int
) -> None:
    path = "/" + "p" * size
    with channel(cluster.master_address) as ch:
        stub = master_pb2_grpc.MasterServiceStub(ch)
        request = request_for(path)  # type: ignore[operator]
        if method == "GetFileInfos":
            response = stub.GetFileInfos(request, timeout=20)
            code, message = response.results[0].code, response.results[0].message
            assert code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        else:
            with pytest.raises(grpc.RpcError) as caught:
                getattr(stub, method)(request, timeout=20)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            message = caught.value.details() or ""
        assert len(message) < 500


@pytest.mark.parametrize(
    ("method", "reply"),
    [("ReadBlock", worker_pb2.BlockChunk), ("ReadSmall", worker_pb2.BlockPayload)],
)
def test_a_block_uri_that_climbs_out_of_its_mount_is_invalid_argument_before_any_fetch(
    cluster: LocalCluster, bucket: str, client: Client, method: str, reply: type
) -> None:
    mount = new_mount_path()
    client.mount(mount, f"s3://{bucket}/inside/", endpoint_url=cluster.s3_endpoint)
    escaping = f"s3://{bucket}/inside/../outside/secret"  # S3 would resolve '..'
    request = worker_pb2.ReadBlockRequest(
        file_id=file_id_for(escaping, "e", 10, 4096),
        index=0,
        offset=0,
        length=-1,
        ufs_uri=escaping,
        etag="e",
        file_size=10,
        block_size=4096,
        mount_path=mount,
    )
    before = sum(s.misses for s in client.worker_stats())
    worker = client.workers()[0]
    with channel(worker.address) as ch:
        call = getattr(ch, "unary_stream" if method == "ReadBlock" else "unary_unary")(
            worker_methods.method_path(method),
            request_serializer=worker_pb2.ReadBlockRequest.SerializeToString,
            response_deserializer=reply.FromString,
        )
        with pytest.raises(grpc.RpcError) as caught:
            answer = call(request, timeout=5)
            list(answer) if method == "ReadBlock" else answer
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert sum(s.misses for s in client.worker_stats()) == before  # nothing fetched
