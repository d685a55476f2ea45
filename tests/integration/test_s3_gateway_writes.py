"""Writes through the S3 gateway, over the session cluster, with real S3 clients: boto3's
PutObject, TransferManager multipart uploads, DeleteObject(s) and CopyObject, and `aws s3
cp` up all go through the write path of a writable mount, so the object is in upstream S3
and in the cache, byte for byte, with the ETag the gateway answered. A read-only mount
refuses with AccessDenied and upstream S3 sees nothing."""

from __future__ import annotations

import base64
import datetime
import hashlib
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
import requests
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError
from prometheus_client.parser import text_string_to_metric_families

from reservoir.client import Client
from reservoir.client.filesystem import ReservoirFileSystem
from reservoir.local.cluster import LocalCluster
from reservoir.local.process import free_port
from tests.conftest import SECURE, new_mount_path
from tests.gateway_process import running_gateway

MiB = 1 << 20
PART = 5 * MiB  # S3's smallest part: boto3's and the write path's
IDLE_S = 3.0  # the gateway's bound on a body that stops arriving (S3's is ~20 s)


@dataclass
class Mounted:
    cluster: LocalCluster
    url: str
    upstream_bucket: str
    writable: str  # "<mount id>": keys of bucket "t" below it are writable
    read_only: str
    metrics_url: str

    bucket = "t"

    def key(self, name: str, *, writable: bool = True) -> str:
        return f"{self.writable if writable else self.read_only}/{name}"

    def path(self, name: str) -> str:
        return f"/t/{self.writable}/{name}"


@pytest.fixture(scope="module")
def mounted(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mounted]:
    upstream = f"gww-{uuid.uuid4().hex[:10]}"
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=upstream)
    s3.put_object(Bucket=upstream, Key="ro/existing.txt", Body=b"read only")
    writable, read_only = new_mount_path(), new_mount_path()
    with Client(cluster.master_address) as c:
        c.mount(
            writable,
            f"s3://{upstream}/rw/",
            endpoint_url=cluster.s3_endpoint,
            block_size=MiB,
            writable=True,
        )
        c.mount(read_only, f"s3://{upstream}/ro/", endpoint_url=cluster.s3_endpoint)
    # Completions and copies send their progress spaces often: boto3 must read past them.
    metrics = f"127.0.0.1:{free_port()}"
    env = {
        "RESERVOIR_WRITE_PART_SIZE": str(PART),
        "RESERVOIR_GATEWAY_PROGRESS_INTERVAL": "0.01",
        "RESERVOIR_GATEWAY_BODY_IDLE_TIMEOUT": str(IDLE_S),
        "RESERVOIR_GATEWAY_KEEPALIVE_TIMEOUT": str(2 * IDLE_S),
        "RESERVOIR_GATEWAY_SEND_TIMEOUT": str(IDLE_S),
        "RESERVOIR_METRICS_LISTEN": metrics,
    }
    log = tmp_path_factory.mktemp("gateway-writes") / "gateway.log"
    with running_gateway(cluster, log, env) as url:
        yield Mounted(
            cluster,
            url,
            upstream,
            writable.removeprefix("/t/"),
            read_only.removeprefix("/t/"),
            f"http://{metrics}/metrics",
        )


@pytest.fixture(scope="module")
def gw(mounted: Mounted) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=mounted.url,
        aws_access_key_id="any",
        aws_secret_access_key="any",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}),
    )


@pytest.fixture(scope="module")
def upstream(mounted: Mounted) -> Any:
    return mounted.cluster.s3_client()


def _code(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = exc.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def _upstream_keys(upstream: Any, bucket: str, prefix: str) -> list[str]:
    listed = upstream.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


def test_put_object_publishes_the_bytes_in_s3_and_the_cache_with_the_etag_it_answers(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    data = os.urandom(2 * PART + 4321)  # three parts of the write path
    key = mounted.key("put/object.bin")
    put = gw.put_object(Bucket="t", Key=key, Body=data)
    got = gw.get_object(Bucket="t", Key=key)
    assert got["Body"].read() == data
    assert got["ETag"] == put["ETag"]
    head = upstream.head_object(Bucket=mounted.upstream_bucket, Key="rw/put/object.bin")
    assert head["ETag"] == put["ETag"] and head["ContentLength"] == len(data)
    with Client(mounted.cluster.master_address) as c:
        assert c.read(mounted.path("put/object.bin")) == data
        assert c.stat(mounted.path("put/object.bin")).etag == put["ETag"].strip('"')


def test_put_object_with_a_wrong_content_md5_is_bad_digest_and_publishes_nothing(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    key = mounted.key("put/bad-md5.bin")
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(ClientError) as exc:
        gw.put_object(Bucket="t", Key=key, Body=b"the body", ContentMD5=wrong)
    assert _code(exc) == ("BadDigest", 400)
    assert _upstream_keys(upstream, mounted.upstream_bucket, "rw/put/bad-md5") == []
    right = base64.b64encode(hashlib.md5(b"the body").digest()).decode()
    gw.put_object(Bucket="t", Key=key, Body=b"the body", ContentMD5=right)
    assert gw.get_object(Bucket="t", Key=key)["Body"].read() == b"the body"


def test_a_transfer_manager_multipart_upload_reads_back_exact(
    mounted: Mounted, gw: Any, upstream: Any, tmp_path: Path
) -> None:
    data = os.urandom(3 * PART + 777)  # four parts, sent in parallel, in any order
    local = tmp_path / "big.bin"
    local.write_bytes(data)
    config = TransferConfig(multipart_threshold=PART, multipart_chunksize=PART, max_concurrency=4)
    key = mounted.key("multipart/big.bin")
    gw.upload_file(str(local), "t", key, Config=config)
    got = gw.get_object(Bucket="t", Key=key)
    assert got["Body"].read() == data
    body = upstream.get_object(Bucket=mounted.upstream_bucket, Key="rw/multipart/big.bin")
    assert body["ETag"] == got["ETag"]
    assert hashlib.sha256(body["Body"].read()).digest() == hashlib.sha256(data).digest()


def test_multipart_parts_listed_completed_out_of_order_refused_and_aborted(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    key = mounted.key("multipart/manual.bin")
    parts = [os.urandom(PART), b"tail"]
    upload = gw.create_multipart_upload(Bucket="t", Key=key)["UploadId"]
    etags = {
        n: gw.upload_part(Bucket="t", Key=key, UploadId=upload, PartNumber=n, Body=body)["ETag"]
        for n, body in reversed(list(enumerate(parts, 1)))
    }
    assert etags[2] == f'"{hashlib.md5(b"tail").hexdigest()}"'
    listed = gw.list_parts(Bucket="t", Key=key, UploadId=upload)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in listed] == [(1, PART), (2, 4)]
    backwards = [{"PartNumber": n, "ETag": etags[n]} for n in (2, 1)]
    with pytest.raises(ClientError) as exc:
        gw.complete_multipart_upload(
            Bucket="t", Key=key, UploadId=upload, MultipartUpload={"Parts": backwards}
        )
    assert _code(exc) == ("InvalidPartOrder", 400)
    gw.abort_multipart_upload(Bucket="t", Key=key, UploadId=upload)
    for call in (
        lambda: gw.upload_part(Bucket="t", Key=key, UploadId=upload, PartNumber=3, Body=b"x"),
        lambda: gw.abort_multipart_upload(Bucket="t", Key=key, UploadId=upload),
        lambda: gw.complete_multipart_upload(
            Bucket="t", Key=key, UploadId=upload, MultipartUpload={"Parts": backwards[::-1]}
        ),
    ):
        with pytest.raises(ClientError) as exc:
            call()
        assert _code(exc) == ("NoSuchUpload", 404)
    assert _upstream_keys(upstream, mounted.upstream_bucket, "rw/multipart/manual") == []


def test_delete_object_removes_it_and_answers_204_for_an_absent_key_too(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    key = mounted.key("delete/one.txt")
    gw.put_object(Bucket="t", Key=key, Body=b"doomed")
    for _ in range(2):  # the second time there is nothing to delete: still 204
        reply = gw.delete_object(Bucket="t", Key=key)
        assert reply["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as exc:
        gw.head_object(Bucket="t", Key=key)
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert _upstream_keys(upstream, mounted.upstream_bucket, "rw/delete/") == []


def test_delete_objects_deletes_the_batch_and_quiet_mode_reports_only_errors(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    keys = [mounted.key(f"batch/{i}.txt") for i in range(5)]
    for key in keys:
        gw.put_object(Bucket="t", Key=key, Body=key.encode())
    reply = gw.delete_objects(
        Bucket="t", Delete={"Objects": [{"Key": k} for k in keys[:3] + ["missing"]]}
    )
    assert sorted(d["Key"] for d in reply["Deleted"]) == sorted(keys[:3] + ["missing"])
    assert "Errors" not in reply
    ro = mounted.key("existing.txt", writable=False)
    quiet = gw.delete_objects(
        Bucket="t", Delete={"Objects": [{"Key": k} for k in [*keys[3:], ro]], "Quiet": True}
    )
    assert "Deleted" not in quiet
    assert [(e["Key"], e["Code"]) for e in quiet["Errors"]] == [(ro, "AccessDenied")]
    assert _upstream_keys(upstream, mounted.upstream_bucket, "rw/batch/") == []
    assert _upstream_keys(upstream, mounted.upstream_bucket, "ro/") == ["ro/existing.txt"]


def test_copy_object_writes_the_source_bytes_and_answers_copy_object_result(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    data = os.urandom(PART + 99)
    source = mounted.key("copy/source.bin")
    gw.put_object(Bucket="t", Key=source, Body=data)
    key = mounted.key("copy/destination.bin")
    reply = gw.copy_object(Bucket="t", Key=key, CopySource={"Bucket": "t", "Key": source})
    got = gw.get_object(Bucket="t", Key=key)
    assert got["Body"].read() == data
    assert reply["CopyObjectResult"]["ETag"] == got["ETag"]
    assert reply["CopyObjectResult"]["LastModified"] == got["LastModified"]
    copied = upstream.get_object(Bucket=mounted.upstream_bucket, Key="rw/copy/destination.bin")
    assert copied["Body"].read() == data
    # UploadPartCopy: a part is a range of an object already there.
    assembled = mounted.key("copy/assembled.bin")
    upload = gw.create_multipart_upload(Bucket="t", Key=assembled)["UploadId"]
    first = gw.upload_part_copy(
        Bucket="t",
        Key=assembled,
        UploadId=upload,
        PartNumber=1,
        CopySource={"Bucket": "t", "Key": source},
        CopySourceRange=f"bytes=0-{PART - 1}",
    )["CopyPartResult"]["ETag"]
    second = gw.upload_part(Bucket="t", Key=assembled, UploadId=upload, PartNumber=2, Body=b"end")
    gw.complete_multipart_upload(
        Bucket="t",
        Key=assembled,
        UploadId=upload,
        MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": first}, {"PartNumber": 2, "ETag": second["ETag"]}]
        },
    )
    assert gw.get_object(Bucket="t", Key=assembled)["Body"].read() == data[:PART] + b"end"
    # From the read-only mount into the writable one: reading needs no write permission.
    ro_source = {"Bucket": "t", "Key": mounted.key("existing.txt", writable=False)}
    gw.copy_object(Bucket="t", Key=mounted.key("copy/from-ro.txt"), CopySource=ro_source)
    assert gw.get_object(Bucket="t", Key=mounted.key("copy/from-ro.txt"))["Body"].read() == (
        b"read only"
    )
    with pytest.raises(ClientError) as exc:
        gw.copy_object(
            Bucket="t", Key=key, CopySource={"Bucket": "t", "Key": mounted.key("copy/nothing")}
        )
    assert _code(exc) == ("NoSuchKey", 404)


def test_writes_to_a_read_only_mount_are_access_denied_and_reach_no_s3(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    key = mounted.key("new.txt", writable=False)
    existing = mounted.key("existing.txt", writable=False)
    calls = [
        # Refused before its body is read: boto3 still gets the answer, not a reset.
        lambda: gw.put_object(Bucket="t", Key=key, Body=os.urandom(6 * MiB)),
        lambda: gw.delete_object(Bucket="t", Key=existing),
        lambda: gw.copy_object(Bucket="t", Key=key, CopySource={"Bucket": "t", "Key": existing}),
        lambda: gw.create_multipart_upload(Bucket="t", Key=key),
        # Beside the mounts, in no mount: nothing may be written there either.
        lambda: gw.put_object(Bucket="t", Key=f"outside-{uuid.uuid4().hex[:6]}.txt", Body=b"x"),
    ]
    for call in calls:
        with pytest.raises(ClientError) as exc:
            call()
        assert _code(exc) == ("AccessDenied", 403)
    assert _upstream_keys(upstream, mounted.upstream_bucket, "ro/") == ["ro/existing.txt"]
    uploads = upstream.list_multipart_uploads(Bucket=mounted.upstream_bucket)
    assert uploads.get("Uploads", []) == []


def test_a_put_whose_body_stops_arriving_is_request_timeout_and_publishes_nothing(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    """A client that sends 10 of 100,000 bytes and then nothing gets S3's RequestTimeout
    once the gateway's idle bound passed, not a request held open for ever."""
    url = urlsplit(mounted.url)
    key = mounted.key("stalled/put.bin")
    head = f"PUT /t/{key} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Length: 100000\r\n\r\n"
    answer = b""
    with socket.create_connection((url.hostname, url.port), timeout=10 * IDLE_S) as sock:
        sock.sendall(head.encode() + b"x" * 10)
        while b"</Error>" not in answer:
            got = sock.recv(65536)
            if not got:
                break
            answer += got
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"<Code>RequestTimeout</Code>" in answer
    assert _upstream_keys(upstream, mounted.upstream_bucket, "rw/stalled/") == []
    with pytest.raises(ClientError) as exc:
        gw.head_object(Bucket=mounted.bucket, Key=key)
    assert _code(exc)[1] == 404


@pytest.mark.skipif(SECURE, reason="the gateway's own HTTP, as in the plain pass: runs there")
def test_a_connection_whose_request_head_stops_arriving_is_closed(mounted: Mounted) -> None:
    """Half a request head, then nothing: the gateway closes the connection once its
    keep-alive bound passed, so stalled clients cannot hold its sockets for ever."""
    url = urlsplit(mounted.url)
    with socket.create_connection((url.hostname, url.port), timeout=10 * IDLE_S) as sock:
        sock.sendall(f"GET /t/{mounted.key('x')} HTTP/1.1\r\nHost: {url.netloc}\r\n".encode())
        assert sock.recv(65536) == b""  # closed, with no answer to a request never made


@pytest.mark.skipif(SECURE, reason="the gateway's own HTTP, as in the plain pass: runs there")
def test_a_get_whose_reader_stops_taking_bytes_is_cut_not_held(mounted: Mounted, gw: Any) -> None:
    """A reader that stops reading a body: once nothing was taken for the send bound,
    the gateway cuts the connection (the reader never gets the whole object), instead of
    holding the response and its read-ahead for ever."""
    size = 16 * MiB
    key = mounted.key("stalled/get.bin")
    gw.put_object(Bucket=mounted.bucket, Key=key, Body=os.urandom(size))
    url = urlsplit(mounted.url)
    received = 0
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # fills at once
        sock.settimeout(10 * IDLE_S)
        sock.connect((url.hostname, url.port))
        sock.sendall(f"GET /t/{key} HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n".encode())
        time.sleep(2 * IDLE_S)  # reads nothing past the send bound
        try:
            while got := sock.recv(1 << 20):
                received += len(got)
        except ConnectionResetError:
            pass  # cut with bytes still unsent: a reset
    assert 0 < received < size


def test_aws_cli_cp_uploads_a_file_through_the_gateway(
    mounted: Mounted, upstream: Any, tmp_path: Path
) -> None:
    if shutil.which("aws") is None:
        pytest.skip("the AWS CLI (`aws`) is not installed")
    data = os.urandom(9 * MiB)  # above the CLI's 8 MiB threshold: a multipart upload
    local = tmp_path / "up.bin"
    local.write_bytes(data)
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="any",
        AWS_SECRET_ACCESS_KEY="any",
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
    )
    aws = ["aws", "--endpoint-url", mounted.url, "--region", "us-east-1"]
    target = f"s3://t/{mounted.key('cli/up.bin')}"
    subprocess.run([*aws, "s3", "cp", str(local), target], env=env, check=True, capture_output=True)
    got = upstream.get_object(Bucket=mounted.upstream_bucket, Key="rw/cli/up.bin")["Body"].read()
    assert got == data
    with Client(mounted.cluster.master_address) as c:
        assert c.read(mounted.path("cli/up.bin")) == data


def test_calls_the_gateway_does_not_serve_get_501_and_leave_the_object_as_it_was(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    """The calls that once emptied or replaced an object, in S3 too (ACLs, tags, retention,
    legal holds, restores, selects, bucket policies): refused by name, nothing written."""
    data = os.urandom(3000)
    key = mounted.key("untouched/object.bin")
    etag = gw.put_object(Bucket="t", Key=key, Body=data)["ETag"]
    until = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    calls = {
        "PutObjectAcl": lambda: gw.put_object_acl(Bucket="t", Key=key, ACL="public-read"),
        "PutObjectTagging": lambda: gw.put_object_tagging(
            Bucket="t", Key=key, Tagging={"TagSet": [{"Key": "team", "Value": "vision"}]}
        ),
        "DeleteObjectTagging": lambda: gw.delete_object_tagging(Bucket="t", Key=key),
        "PutObjectRetention": lambda: gw.put_object_retention(
            Bucket="t", Key=key, Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until}
        ),
        "PutObjectLegalHold": lambda: gw.put_object_legal_hold(
            Bucket="t", Key=key, LegalHold={"Status": "ON"}
        ),
        "RestoreObject": lambda: gw.restore_object(Bucket="t", Key=key, RestoreRequest={"Days": 1}),
        "SelectObjectContent": lambda: gw.select_object_content(
            Bucket="t",
            Key=key,
            Expression="select * from s3object",
            ExpressionType="SQL",
            InputSerialization={"CSV": {}},
            OutputSerialization={"CSV": {}},
        ),
        "PutBucketPolicy": lambda: gw.put_bucket_policy(Bucket="t", Policy="{}"),
    }
    for name, call in calls.items():
        with pytest.raises(ClientError) as exc:
            call()
        assert _code(exc) == ("NotImplemented", 501), name
        assert name in exc.value.response["Error"]["Message"]
        got = gw.get_object(Bucket="t", Key=key)
        assert (got["Body"].read(), got["ETag"]) == (data, etag), name
        upstream_key = "rw/untouched/object.bin"
        kept = upstream.get_object(Bucket=mounted.upstream_bucket, Key=upstream_key)
        assert (kept["Body"].read(), kept["ETag"]) == (data, etag), name


def test_a_write_asking_for_what_the_gateway_does_not_provide_is_refused_naming_it(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    key = mounted.key("refused/object.bin")
    asks: list[dict[str, Any]] = [
        {"ServerSideEncryption": "aws:kms"},
        {"StorageClass": "GLACIER"},
        {"Tagging": "team=vision"},
        {
            "ObjectLockMode": "GOVERNANCE",
            "ObjectLockRetainUntilDate": datetime.datetime(2030, 1, 1),
        },
    ]
    for ask in asks:
        with pytest.raises(ClientError) as exc:
            gw.put_object(Bucket="t", Key=key, Body=b"x", **ask)
        assert _code(exc) == ("NotImplemented", 501), ask
        assert "x-amz-" in exc.value.response["Error"]["Message"]
    assert _upstream_keys(upstream, mounted.upstream_bucket, "rw/refused/") == []


def test_list_multipart_uploads_lists_an_open_upload_until_it_is_aborted(
    mounted: Mounted, gw: Any
) -> None:
    key = mounted.key("leaked/upload.bin")
    upload = gw.create_multipart_upload(Bucket="t", Key=key)["UploadId"]
    prefix = mounted.key("leaked/")
    listed = gw.list_multipart_uploads(Bucket="t", Prefix=prefix)
    assert [(u["Key"], u["UploadId"]) for u in listed["Uploads"]] == [(key, upload)]
    rolled = gw.list_multipart_uploads(Bucket="t", Prefix=mounted.key(""), Delimiter="/")
    assert {"Prefix": prefix} in rolled["CommonPrefixes"]
    gw.abort_multipart_upload(Bucket="t", Key=key, UploadId=upload)
    assert "Uploads" not in gw.list_multipart_uploads(Bucket="t", Prefix=prefix)


def test_list_buckets_shows_when_each_bucket_was_made(gw: Any) -> None:
    buckets = gw.list_buckets()["Buckets"]
    made = {b["Name"]: b["CreationDate"] for b in buckets}
    assert made["t"] > datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)


def test_a_single_part_put_answers_the_md5_etag_that_s3_holds_too(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    data = os.urandom(PART - 1)  # one part of the write path: one PUT
    put = gw.put_object(Bucket="t", Key=mounted.key("md5/one.bin"), Body=data)
    assert put["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    head = upstream.head_object(Bucket=mounted.upstream_bucket, Key="rw/md5/one.bin")
    assert head["ETag"] == put["ETag"]
    assert gw.get_object(Bucket="t", Key=mounted.key("md5/one.bin"))["Body"].read() == data


def test_if_none_match_creates_only_when_absent_and_two_racing_creators_get_one_200(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    key = mounted.key("conditional/new.bin")
    first = gw.put_object(Bucket="t", Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as exc:
        gw.put_object(Bucket="t", Key=key, Body=b"second", IfNoneMatch="*")
    assert _code(exc) == ("PreconditionFailed", 412)
    got = upstream.get_object(Bucket=mounted.upstream_bucket, Key="rw/conditional/new.bin")
    assert (got["Body"].read(), got["ETag"]) == (b"first", first["ETag"])

    race = mounted.key("conditional/race.bin")
    bodies = [f"creator {n}".encode() * 1000 for n in range(4)]

    def create(body: bytes) -> str:
        try:
            gw.put_object(Bucket="t", Key=race, Body=body, IfNoneMatch="*")
        except ClientError as error:
            return str(error.response["Error"]["Code"])
        return "ok"

    with ThreadPoolExecutor(len(bodies)) as pool:
        outcomes = list(pool.map(create, bodies))
    assert sorted(outcomes) == ["PreconditionFailed"] * 3 + ["ok"]
    winner = bodies[outcomes.index("ok")]
    kept = upstream.get_object(Bucket=mounted.upstream_bucket, Key="rw/conditional/race.bin")
    assert kept["Body"].read() == winner
    assert gw.get_object(Bucket="t", Key=race)["Body"].read() == winner


def test_if_match_replaces_only_the_version_named_and_multipart_completion_checks_too(
    mounted: Mounted, gw: Any
) -> None:
    key = mounted.key("conditional/match.bin")
    old = gw.put_object(Bucket="t", Key=key, Body=b"v1")["ETag"]
    new = gw.put_object(Bucket="t", Key=key, Body=b"v2", IfMatch=old)["ETag"]
    with pytest.raises(ClientError) as exc:
        gw.put_object(Bucket="t", Key=key, Body=b"v3", IfMatch=old)
    assert _code(exc) == ("PreconditionFailed", 412)
    with pytest.raises(ClientError) as exc:
        gw.put_object(Bucket="t", Key=mounted.key("conditional/none.bin"), Body=b"x", IfMatch=old)
    assert _code(exc) == ("NoSuchKey", 404)
    assert gw.get_object(Bucket="t", Key=key)["ETag"] == new

    upload = gw.create_multipart_upload(Bucket="t", Key=key)["UploadId"]
    etag = gw.upload_part(Bucket="t", Key=key, UploadId=upload, PartNumber=1, Body=b"v4")["ETag"]
    with pytest.raises(ClientError) as exc:
        gw.complete_multipart_upload(
            Bucket="t",
            Key=key,
            UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
            IfNoneMatch="*",
        )
    assert _code(exc) == ("PreconditionFailed", 412)
    assert gw.get_object(Bucket="t", Key=key)["Body"].read() == b"v2"


def test_content_type_and_user_metadata_round_trip_through_s3_the_sdk_and_fsspec(
    mounted: Mounted, gw: Any, upstream: Any
) -> None:
    key = mounted.key("meta/page.html")
    written = {
        "ContentType": "text/html; charset=utf-8",
        "ContentEncoding": "identity",
        "ContentDisposition": 'attachment; filename="page.html"',
        "CacheControl": "max-age=60",
        "Metadata": {"team": "vision", "run": "42"},
    }
    gw.put_object(Bucket="t", Key=key, Body=b"<html/>", **written)
    for head in (
        gw.head_object(Bucket="t", Key=key),
        gw.get_object(Bucket="t", Key=key),
        upstream.head_object(Bucket=mounted.upstream_bucket, Key="rw/meta/page.html"),
    ):
        assert {k: head[k] for k in written} == written
    with Client(mounted.cluster.master_address) as c:
        meta = c.stat(mounted.path("meta/page.html")).metadata
        assert meta.content_type == "text/html; charset=utf-8"
        assert dict(meta.user) == {"team": "vision", "run": "42"}
        fs = ReservoirFileSystem(client=c, skip_instance_cache=True)
        info = fs.info(mounted.path("meta/page.html"))
        assert info["ContentType"] == "text/html; charset=utf-8"
        assert info["metadata"] == {"team": "vision", "run": "42"}

    copied, replaced = mounted.key("meta/copied.html"), mounted.key("meta/replaced.html")
    source = {"Bucket": "t", "Key": key}
    gw.copy_object(Bucket="t", Key=copied, CopySource=source)
    assert gw.head_object(Bucket="t", Key=copied)["Metadata"] == written["Metadata"]
    gw.copy_object(
        Bucket="t",
        Key=replaced,
        CopySource=source,
        MetadataDirective="REPLACE",
        ContentType="text/plain",
        Metadata={"kind": "copy"},
    )
    head = gw.head_object(Bucket="t", Key=replaced)
    assert (head["ContentType"], head["Metadata"]) == ("text/plain", {"kind": "copy"})

    upload_key = mounted.key("meta/multipart.bin")
    upload = gw.create_multipart_upload(
        Bucket="t", Key=upload_key, ContentType="application/x-tar", Metadata={"a": "b"}
    )["UploadId"]
    etag = gw.upload_part(Bucket="t", Key=upload_key, UploadId=upload, PartNumber=1, Body=b"x")
    gw.complete_multipart_upload(
        Bucket="t",
        Key=upload_key,
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag["ETag"]}]},
    )
    head = gw.head_object(Bucket="t", Key=upload_key)
    assert (head["ContentType"], head["Metadata"]) == ("application/x-tar", {"a": "b"})


def test_the_gateways_metrics_count_requests_by_operation_and_status_and_bytes(
    mounted: Mounted, gw: Any
) -> None:
    key = mounted.key("metrics/object.bin")
    gw.put_object(Bucket="t", Key=key, Body=b"m" * 1000)
    gw.get_object(Bucket="t", Key=key)["Body"].read()
    with pytest.raises(ClientError):
        gw.put_object_tagging(Bucket="t", Key=key, Tagging={"TagSet": []})
    families = {
        f.name: f
        for f in text_string_to_metric_families(requests.get(mounted.metrics_url, timeout=10).text)
    }

    def value(family: str, name: str, **labels: str) -> float:
        return sum(
            s.value
            for s in families[family].samples
            if s.name == name and labels.items() <= s.labels.items()
        )

    requests_total = "reservoir_gateway_requests"
    assert (
        value(requests_total, requests_total + "_total", operation="PutObject", status="200") >= 1
    )
    refused = {"operation": "PutObjectTagging", "status": "501"}
    assert value(requests_total, requests_total + "_total", **refused) >= 1
    received = "reservoir_gateway_received_bytes"
    assert value(received, received + "_total", operation="PutObject") >= 1000
    sent = "reservoir_gateway_sent_bytes"
    assert value(sent, sent + "_total", operation="GetObject") >= 1000
    seconds = "reservoir_gateway_request_seconds"
    assert value(seconds, seconds + "_count", operation="GetObject") >= 1
