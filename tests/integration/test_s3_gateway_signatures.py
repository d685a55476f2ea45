"""A gateway that checks AWS Signature V4 (a keys file) and serves HTTPS, over the
session cluster: boto3 signing with a known key reads, presigned URLs work, and every
other request (anonymous, an unknown key, a wrong secret, a tampered presigned URL) gets
AccessDenied and nothing else; the key's role decides whether a write is even tried."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from reservoir.client import Client
from reservoir.local import pki
from reservoir.local.cluster import LocalCluster
from reservoir.local.gateway_keys import (
    READER_KEY,
    WRITER_KEY,
    read_gateway_key,
    write_gateway_keys,
)
from tests.conftest import new_mount_path
from tests.gateway_process import running_gateway

BODY = b"signed bytes " * 100


@dataclass
class Signed:
    url: str
    ca: str
    keys_dir: Path
    key: str  # "t/<mount id>/x y.bin": a key that needs encoding in the signed path
    writable: str  # "<mount id>": keys below it are in a writable mount (upstream "rw/")
    upstream: Any  # the upstream S3 bucket's client and name
    upstream_bucket: str

    def client(self, access_key: str, secret: str | None = None, **config: Any) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret or read_gateway_key(self.keys_dir, access_key),
            region_name="us-east-1",
            verify=self.ca,
            config=Config(retries={"max_attempts": 1}, **config),
        )


@pytest.fixture(scope="module")
def signed(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signed]:
    upstream = f"sig-{uuid.uuid4().hex[:10]}"
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=upstream)
    s3.put_object(Bucket=upstream, Key="x y.bin", Body=BODY)
    root = new_mount_path()
    with Client(cluster.master_address) as c:
        c.mount(root, f"s3://{upstream}/", endpoint_url=cluster.s3_endpoint)
        writable = new_mount_path()
        c.mount(writable, f"s3://{upstream}/rw/", endpoint_url=cluster.s3_endpoint, writable=True)
    tmp = tmp_path_factory.mktemp("signed-gateway")
    creds = pki.create(tmp / "tls", [], hosts=[])
    env = {
        "RESERVOIR_GATEWAY_TLS_CERT": str(creds.cert),
        "RESERVOIR_GATEWAY_TLS_KEY": str(creds.key),
        "RESERVOIR_GATEWAY_KEYS_FILE": str(write_gateway_keys(tmp)),
    }
    with running_gateway(cluster, tmp / "gateway.log", env, ca=str(creds.ca)) as url:
        yield Signed(
            url,
            str(creds.ca),
            tmp,
            f"{root.removeprefix('/t/')}/x y.bin",
            writable.removeprefix("/t/"),
            s3,
            upstream,
        )


def _denied(exc: pytest.ExceptionInfo[ClientError]) -> bool:
    response = exc.value.response
    return (response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]) == (
        "AccessDenied",
        403,
    )


def test_requests_signed_with_a_known_key_are_served_over_https(signed: Signed) -> None:
    reader = signed.client(READER_KEY)
    assert signed.url.startswith("https://")
    assert reader.get_object(Bucket="t", Key=signed.key)["Body"].read() == BODY
    assert (
        reader.get_object(Bucket="t", Key=signed.key, Range="bytes=0-5")["Body"].read() == BODY[:6]
    )
    listed = reader.list_objects_v2(Bucket="t", Prefix=signed.key.split("/")[0] + "/")
    assert [c["Key"] for c in listed["Contents"]] == [signed.key]


def test_a_presigned_url_reads_and_a_tampered_one_is_denied(signed: Signed) -> None:
    # Signature V4 (boto3 presigns with V2 unless told; V2 is refused like any bad signature).
    url = signed.client(READER_KEY, signature_version="s3v4").generate_presigned_url(
        "get_object", Params={"Bucket": "t", "Key": signed.key}, ExpiresIn=600
    )
    reply = requests.get(url, verify=signed.ca, timeout=10)
    assert (reply.status_code, reply.content) == (200, BODY)
    tampered = url.replace("X-Amz-Signature=", "X-Amz-Signature=0")[: len(url)]
    denied = requests.get(tampered, verify=signed.ca, timeout=10)
    assert denied.status_code == 403 and "<Code>AccessDenied</Code>" in denied.text
    other_key = url.replace("x%20y.bin", "x%20z.bin")
    assert requests.get(other_key, verify=signed.ca, timeout=10).status_code == 403


@pytest.mark.parametrize("who", ["anonymous", "unknown key", "wrong secret"])
def test_unsigned_or_badly_signed_requests_get_access_denied_and_nothing_else(
    signed: Signed, who: str
) -> None:
    if who == "anonymous":
        client = signed.client(READER_KEY, signature_version=UNSIGNED)
    elif who == "unknown key":
        client = signed.client("nobody", secret="whatever")
    else:
        client = signed.client(READER_KEY, secret="not-the-secret")
    for call in (
        lambda: client.get_object(Bucket="t", Key=signed.key),
        lambda: client.get_object(Bucket="t", Key="no/such/key"),
        lambda: client.get_object(Bucket="no-such-bucket", Key="x"),
        lambda: client.list_objects_v2(Bucket="t"),
        lambda: client.list_buckets(),
    ):
        with pytest.raises(ClientError) as exc:
            call()
        assert _denied(exc)  # the same answer whether the object exists or not
    with pytest.raises(ClientError) as exc:
        client.head_object(Bucket="t", Key=signed.key)
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_the_key_role_decides_whether_a_write_is_tried(signed: Signed) -> None:
    key = f"{signed.writable}/by role.bin"
    with pytest.raises(ClientError) as exc:
        signed.client(READER_KEY).put_object(Bucket="t", Key=key, Body=b"x")
    assert _denied(exc)
    listed = signed.upstream.list_objects_v2(Bucket=signed.upstream_bucket, Prefix="rw/")
    assert listed.get("Contents", []) == []
    # Over HTTPS boto3 frames the body (aws-chunked) with a CRC32 trailer the gateway checks.
    writer = signed.client(WRITER_KEY)
    writer.put_object(Bucket="t", Key=key, Body=BODY)
    assert signed.client(READER_KEY).get_object(Bucket="t", Key=key)["Body"].read() == BODY
    with pytest.raises(ClientError) as exc:
        signed.client(READER_KEY).delete_object(Bucket="t", Key=key)
    assert _denied(exc)
    writer.delete_object(Bucket="t", Key=key)
    listed = signed.upstream.list_objects_v2(Bucket=signed.upstream_bucket, Prefix="rw/")
    assert listed.get("Contents", []) == []
