"""Mounts the operator did not allow are refused before the master contacts anything."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from reservoir.v1 import common_pb2, master_pb2, master_pb2_grpc
from tests.conftest import channel, new_mount_path


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def _any(self) -> None:
        _Recorder.seen.append(f"{self.command} {self.path} {self.headers.get('Authorization')}")
        self.send_response(403)
        self.end_headers()

    do_GET = do_HEAD = do_PUT = do_POST = _any

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def _mount_code(cluster: LocalCluster, uri: str, endpoint: str = "") -> grpc.StatusCode:
    with channel(cluster.master_address) as ch:
        stub = master_pb2_grpc.MasterServiceStub(ch)
        request = master_pb2.MountRequest(
            path=new_mount_path(), uri=uri, options=common_pb2.MountOptions(endpoint_url=endpoint)
        )
        with pytest.raises(grpc.RpcError) as caught:
            stub.Mount(request, timeout=10)
        return caught.value.code()  # type: ignore[no-any-return]


def test_a_file_mount_of_host_directories_is_refused(cluster: LocalCluster, client: Client) -> None:
    assert _mount_code(cluster, "file:///etc") == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(PermissionError, match="not allowed"):
        client.mount(new_mount_path(), "file:///etc")
    assert not any(m.uri.startswith("file:") for m in client.mounts())


@pytest.mark.parametrize(
    "endpoint", ["http://169.254.169.254", "http://169.254.170.2:80", "http://[fe80::1]"]
)
def test_link_local_endpoints_are_refused(cluster: LocalCluster, endpoint: str) -> None:
    assert _mount_code(cluster, "s3://bucket/", endpoint) == grpc.StatusCode.PERMISSION_DENIED


def test_an_endpoint_outside_the_allow_list_gets_no_request(tmp_path: Path, recorder: str) -> None:
    allowed = "http://127.0.0.1:1"
    cluster = LocalCluster.up(
        tmp_path / "c", workers=1, lease_ttl=3, env={"RESERVOIR_ALLOWED_ENDPOINTS": allowed}
    )
    try:
        assert _mount_code(cluster, "s3://bucket/", recorder) == grpc.StatusCode.PERMISSION_DENIED
        assert _Recorder.seen == []
    finally:
        cluster.down()
