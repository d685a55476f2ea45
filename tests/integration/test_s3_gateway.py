"""The S3 gateway against real S3 clients: boto3, s3fs and the AWS CLI talk to a
`reservoir gateway` process reading through the session cluster, and what they get is
compared with what the same clients get from the upstream S3 server (a real HTTP S3:
moto's) for the same objects: bytes, ETags, ranges, listings page by page, errors."""

from __future__ import annotations

import datetime
import hashlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
import s3fs
from botocore.config import Config
from botocore.exceptions import ClientError

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.conftest import new_mount_path
from tests.gateway_process import running_gateway

# Names whose key order differs from a depth-first walk of the directories (`-` and `.`
# sort before `/`), a name with spaces and signs, non-ASCII names, an empty object, a
# large one read in several pieces, and a directory larger than the gateway's pages.
SMALL = [f"small/f{i:03d}.bin" for i in range(40)]
TRICKY = [
    "a-b.txt",
    "a.txt",
    "a/x.txt",
    "a/y/z.txt",
    "a/y-1.txt",
    "a!/q.txt",
    "b c+d%e.txt",
    "ünï/çødé.txt",
    "empty.bin",
]
BIG = "big.bin"
MULTIPART = "multipart.bin"
LIST_PAGE = 16  # the gateway's master pages: every listing of small/ crosses several
PIECE = 1 << 20  # the gateway streams a body in pieces of this size


@dataclass
class Setup:
    cluster: LocalCluster
    url: str
    upstream_bucket: str
    mount_id: str  # the gateway's keys are "<mount_id>/<upstream key>" in bucket "t"
    data: dict[str, bytes]

    bucket = "t"

    def key(self, upstream_key: str) -> str:
        return f"{self.mount_id}/{upstream_key}"


def _payload(name: str, size: int) -> bytes:
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


@pytest.fixture(scope="module")
def setup(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    upstream = f"gw-{uuid.uuid4().hex[:10]}"
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=upstream)
    data = {name: _payload(name, 100 + i) for i, name in enumerate(SMALL + TRICKY)}
    data["empty.bin"] = b""
    data[BIG] = os.urandom(5 * PIECE + 12345)
    for key, body in data.items():
        s3.put_object(Bucket=upstream, Key=key, Body=body)
    # A multipart upload's ETag is not an MD5 (it ends in -2): the gateway must pass it on.
    parts = [os.urandom(5 << 20), os.urandom(1000)]
    upload = s3.create_multipart_upload(Bucket=upstream, Key=MULTIPART)
    etags = [
        s3.upload_part(
            Bucket=upstream, Key=MULTIPART, PartNumber=n, UploadId=upload["UploadId"], Body=part
        )["ETag"]
        for n, part in enumerate(parts, 1)
    ]
    s3.complete_multipart_upload(
        Bucket=upstream,
        Key=MULTIPART,
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"ETag": e, "PartNumber": n} for n, e in enumerate(etags, 1)]},
    )
    data[MULTIPART] = b"".join(parts)
    root = new_mount_path()
    with Client(cluster.master_address) as c:
        c.mount(root, f"s3://{upstream}/", endpoint_url=cluster.s3_endpoint)
    env = {
        "RESERVOIR_LIST_PAGE_SIZE": str(LIST_PAGE),
        "RESERVOIR_GATEWAY_READ_PIECE": str(PIECE),
    }
    log = tmp_path_factory.mktemp("gateway") / "gateway.log"
    with running_gateway(cluster, log, env) as url:
        yield Setup(cluster, url, upstream, root.removeprefix("/t/"), data)


def _boto3(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="any",
        aws_secret_access_key="any",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}),
    )


@pytest.fixture(scope="module")
def gw(setup: Setup) -> Any:
    return _boto3(setup.url)


@pytest.fixture(scope="module")
def upstream(setup: Setup) -> Any:
    return setup.cluster.s3_client()


def _code(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    error = exc.value.response
    return error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]


# ---- GetObject and HeadObject ------------------------------------------------------------


def test_get_object_returns_the_upstream_bytes_etag_and_size(
    setup: Setup, gw: Any, upstream: Any
) -> None:
    for name, body in setup.data.items():
        got = gw.get_object(Bucket=setup.bucket, Key=setup.key(name))
        original = upstream.head_object(Bucket=setup.upstream_bucket, Key=name)
        assert got["Body"].read() == body, name
        assert got["ETag"] == original["ETag"], name
        assert got["ContentLength"] == len(body) == original["ContentLength"]
        assert got["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
    assert gw.head_object(Bucket=setup.bucket, Key=setup.key(MULTIPART))["ETag"].endswith('-2"')


@pytest.mark.parametrize(
    "header",
    [
        "bytes=0-9",
        "bytes=100-",
        "bytes=-7",
        "bytes=5-99999999",
        f"bytes={PIECE - 3}-{3 * PIECE + 5}",
    ],
)
def test_ranged_get_answers_206_with_the_bytes_and_content_range_s3_gives(
    setup: Setup, gw: Any, upstream: Any, header: str
) -> None:
    got = gw.get_object(Bucket=setup.bucket, Key=setup.key(BIG), Range=header)
    want = upstream.get_object(Bucket=setup.upstream_bucket, Key=BIG, Range=header)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["ContentRange"] == want["ContentRange"]
    assert got["Body"].read() == want["Body"].read()


def test_unsatisfiable_range_is_416_invalid_range_and_odd_ranges_give_the_whole_object(
    setup: Setup, gw: Any
) -> None:
    size = len(setup.data[BIG])
    with pytest.raises(ClientError) as exc:
        gw.get_object(Bucket=setup.bucket, Key=setup.key(BIG), Range=f"bytes={size}-")
    assert _code(exc) == ("InvalidRange", 416)
    with pytest.raises(ClientError) as exc:
        gw.get_object(Bucket=setup.bucket, Key=setup.key("empty.bin"), Range="bytes=0-")
    assert _code(exc) == ("InvalidRange", 416)
    # Several ranges, or last before first: S3 ignores the header.
    for header in ("bytes=0-1,4-5", "bytes=9-3"):
        whole = gw.get_object(Bucket=setup.bucket, Key=setup.key("a.txt"), Range=header)
        assert whole["ResponseMetadata"]["HTTPStatusCode"] == 200
        assert whole["Body"].read() == setup.data["a.txt"]


def test_conditional_gets_answer_304_and_412_as_s3_does(setup: Setup, gw: Any) -> None:
    key = setup.key("a.txt")
    etag = gw.head_object(Bucket=setup.bucket, Key=key)["ETag"]
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
    earlier = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    assert gw.get_object(Bucket=setup.bucket, Key=key, IfMatch=etag)["Body"].read()
    with pytest.raises(ClientError) as exc:
        gw.get_object(Bucket=setup.bucket, Key=key, IfMatch='"0000"')
    assert _code(exc) == ("PreconditionFailed", 412)
    with pytest.raises(ClientError) as exc:
        gw.get_object(Bucket=setup.bucket, Key=key, IfNoneMatch=etag)
    assert _code(exc) == ("304", 304)
    with pytest.raises(ClientError) as exc:
        gw.get_object(Bucket=setup.bucket, Key=key, IfModifiedSince=later)
    assert _code(exc) == ("304", 304)
    assert gw.get_object(Bucket=setup.bucket, Key=key, IfModifiedSince=earlier)["Body"].read()
    with pytest.raises(ClientError) as exc:
        gw.get_object(Bucket=setup.bucket, Key=key, IfUnmodifiedSince=earlier)
    assert _code(exc) == ("PreconditionFailed", 412)
    # If-Match holding wins over If-Unmodified-Since failing.
    assert gw.get_object(Bucket=setup.bucket, Key=key, IfMatch=etag, IfUnmodifiedSince=earlier)


def test_missing_keys_and_buckets_are_no_such_key_and_no_such_bucket(setup: Setup, gw: Any) -> None:
    for key in ("nope.txt", "a", "a/", "a//x.txt", "a.txt/more"):
        with pytest.raises(ClientError) as exc:
            gw.get_object(Bucket=setup.bucket, Key=setup.key(key))
        assert _code(exc) == ("NoSuchKey", 404), key
        assert exc.value.response["Error"]["Key"] == setup.key(key)
        # HeadObject: 404 with no body, which boto3 reports as code "404".
        with pytest.raises(ClientError) as exc:
            gw.head_object(Bucket=setup.bucket, Key=setup.key(key))
        assert _code(exc) == ("404", 404), key
    with pytest.raises(ClientError) as exc:
        gw.get_object(Bucket="no-such-bucket", Key="x")
    assert _code(exc) == ("NoSuchBucket", 404)
    with pytest.raises(ClientError) as exc:
        gw.list_objects_v2(Bucket="no-such-bucket")
    assert _code(exc) == ("NoSuchBucket", 404)


def test_an_error_body_is_s3_xml_with_the_request_id_of_its_header(setup: Setup) -> None:
    reply = requests.get(f"{setup.url}/t/{setup.mount_id}/nope", timeout=10)
    assert reply.status_code == 404
    assert reply.headers["Content-Type"] == "application/xml"
    request_id = reply.headers["x-amz-request-id"]
    assert "<Code>NoSuchKey</Code>" in reply.text
    assert f"<RequestId>{request_id}</RequestId>" in reply.text
    head = requests.head(f"{setup.url}/t/{setup.mount_id}/nope", timeout=10)
    assert (head.status_code, head.content) == (404, b"")


# ---- buckets -------------------------------------------------------------------------------


def test_buckets_are_the_top_level_directories(setup: Setup, gw: Any) -> None:
    assert "t" in [b["Name"] for b in gw.list_buckets()["Buckets"]]
    gw.head_bucket(Bucket="t")
    with pytest.raises(ClientError) as exc:
        gw.head_bucket(Bucket="no-such-bucket")
    assert _code(exc) == ("404", 404)
    assert gw.get_bucket_location(Bucket="t")["LocationConstraint"] is None  # us-east-1


# ---- listings, compared with the upstream S3's for the same keys -------------------------


def _pages(client: Any, call: str, **params: Any) -> list[dict[str, Any]]:
    pages = []
    for page in client.get_paginator(call).paginate(**params):
        page.pop("ResponseMetadata")
        pages.append(page)
    return pages


def _relative(pages: list[dict[str, Any]], cut: int, echoed: tuple[str, ...]) -> list[Any]:
    """Pages as the upstream would give them: keys (and the echoed `echoed` fields)
    without their first `cut` characters (the gateway's mount component), and without
    the fields that differ by construction (bucket name, tokens)."""
    out = []
    for page in pages:
        out.append(
            {
                "keys": [(c["Key"][cut:], c["ETag"], c["Size"]) for c in page.get("Contents", [])],
                "prefixes": [p["Prefix"][cut:] for p in page.get("CommonPrefixes", [])],
                **{k: v for k, v in page.items() if k in ("IsTruncated", "KeyCount", "MaxKeys")},
                **{k: page[k][cut:] for k in echoed if k in page},
            }
        )
    return out


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"Delimiter": "/"},
        {"Prefix": "a", "Delimiter": "/"},
        {"Prefix": "a"},
        {"Prefix": "a/", "Delimiter": "/"},
        {"Prefix": "small/f01"},
        {"Delimiter": "/", "StartAfter": "a-b.txt"},
        {"StartAfter": "a/x.txt"},
        {"StartAfter": "small/f017.bin", "Prefix": "small/"},
        {"Delimiter": ".", "Prefix": "a"},
        {"Prefix": "a//"},
        {"Prefix": "a/./", "Delimiter": "/"},
    ],
    ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "all",
)
@pytest.mark.parametrize("page_size", [3, 1000])
def test_list_objects_v2_pages_are_upstreams_page_for_page(
    setup: Setup, gw: Any, upstream: Any, params: dict[str, str], page_size: int
) -> None:
    mine = {k: setup.key(v) if k in ("Prefix", "StartAfter") else v for k, v in params.items()}
    mine.setdefault("Prefix", setup.key(""))
    config = {"PageSize": page_size}
    got = _pages(gw, "list_objects_v2", Bucket=setup.bucket, PaginationConfig=config, **mine)
    want = _pages(
        upstream, "list_objects_v2", Bucket=setup.upstream_bucket, PaginationConfig=config, **params
    )
    cut = len(setup.key(""))
    assert _relative(got, cut, ("StartAfter",)) == _relative(want, 0, ("StartAfter",))
    if page_size == 3 and len(got) > 1:
        assert got[0]["IsTruncated"] and got[0]["NextContinuationToken"]
        assert got[1]["ContinuationToken"] == got[0]["NextContinuationToken"]


def _flat(pages: list[dict[str, Any]], cut: int) -> tuple[list[str], list[str]]:
    keys = [c["Key"][cut:] for page in pages for c in page.get("Contents", [])]
    prefixes = [p["Prefix"][cut:] for page in pages for p in page.get("CommonPrefixes", [])]
    return keys, prefixes


@pytest.mark.parametrize("params", [{}, {"Delimiter": "/"}, {"Prefix": "a", "Delimiter": "/"}])
def test_list_objects_v1_pages_by_marker_to_the_upstreams_listing(
    setup: Setup, gw: Any, upstream: Any, params: dict[str, str]
) -> None:
    """The same keys and prefixes as the upstream's, in pages of at most 3 of them
    together, with NextMarker (the last one) exactly when there is a delimiter. (The
    upstream's own v1 pages are not S3's: it counts only keys against max-keys.)"""
    mine = dict(params, Prefix=setup.key(params.get("Prefix", "")))
    got = _pages(gw, "list_objects", Bucket=setup.bucket, PaginationConfig={"PageSize": 3}, **mine)
    want = _pages(upstream, "list_objects", Bucket=setup.upstream_bucket, **params)
    assert _flat(got, len(setup.key(""))) == _flat(want, 0)
    assert len(got) > 1
    for page in got:
        listed = page.get("Contents", []) + page.get("CommonPrefixes", [])
        assert 0 < len(listed) <= 3
        if page["IsTruncated"] and "Delimiter" in params:
            last = max(
                [c["Key"] for c in page.get("Contents", [])]
                + [p["Prefix"] for p in page.get("CommonPrefixes", [])]
            )
            assert page["NextMarker"] == last
        else:
            assert "NextMarker" not in page


def test_a_directory_larger_than_a_page_lists_whole_and_in_order(setup: Setup, gw: Any) -> None:
    listed = gw.list_objects_v2(Bucket=setup.bucket, Prefix=setup.key("small/"))
    keys = [c["Key"] for c in listed["Contents"]]
    assert keys == [setup.key(k) for k in SMALL]  # 40 keys over master pages of 16
    assert (listed["KeyCount"], listed["IsTruncated"]) == (40, False)


def test_url_encoding_type_encodes_keys_and_prefixes(setup: Setup, gw: Any) -> None:
    reply = requests.get(
        f"{setup.url}/t",
        params={"list-type": "2", "prefix": setup.key("b c"), "encoding-type": "url"},
        timeout=10,
    )
    assert reply.status_code == 200
    assert "<Key>" + setup.key("b%20c%2Bd%25e.txt") + "</Key>" in reply.text
    assert "<EncodingType>url</EncodingType>" in reply.text
    bad = requests.get(f"{setup.url}/t", params={"list-type": "2", "max-keys": "x"}, timeout=10)
    assert bad.status_code == 400 and "<Code>InvalidArgument</Code>" in bad.text
    token = requests.get(
        f"{setup.url}/t", params={"list-type": "2", "continuation-token": "!!"}, timeout=10
    )
    assert token.status_code == 400 and "<Code>InvalidArgument</Code>" in token.text


# ---- writes: test_s3_gateway_writes.py; buckets are mounts, made by `reservoir mount` ---------


def test_create_and_delete_bucket_answer_not_implemented(setup: Setup, gw: Any) -> None:
    for call in (
        lambda: gw.create_bucket(Bucket="newbucket"),
        lambda: gw.delete_bucket(Bucket=setup.bucket),
    ):
        with pytest.raises(ClientError) as exc:
            call()
        assert _code(exc) == ("NotImplemented", 501)


# ---- s3fs / fsspec --------------------------------------------------------------------------


def test_s3fs_ls_find_cat_and_ranges_through_the_gateway(setup: Setup) -> None:
    fs = s3fs.S3FileSystem(
        key="any", secret="any", endpoint_url=setup.url, skip_instance_cache=True
    )
    base = f"t/{setup.mount_id}"
    assert sorted(fs.ls(f"{base}/a", detail=False)) == [
        f"{base}/a/x.txt",
        f"{base}/a/y",
        f"{base}/a/y-1.txt",
    ]
    found = fs.find(base)
    assert found == sorted(f"{base}/{k}" for k in setup.data)
    assert fs.cat(f"{base}/{BIG}") == setup.data[BIG]
    assert (
        fs.cat_file(f"{base}/{BIG}", start=PIECE - 10, end=PIECE + 10)
        == setup.data[BIG][PIECE - 10 : PIECE + 10]
    )
    with fs.open(f"{base}/{MULTIPART}", "rb", block_size=1 << 20) as f:
        f.seek(3 << 20)
        assert f.read(2 << 20) == setup.data[MULTIPART][3 << 20 : 5 << 20]
    assert fs.info(f"{base}/ünï/çødé.txt")["size"] == len(setup.data["ünï/çødé.txt"])


# ---- the AWS CLI -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def aws(setup: Setup) -> list[str]:
    if shutil.which("aws") is None:
        pytest.skip("the AWS CLI (`aws`) is not installed")
    return ["aws", "--endpoint-url", setup.url, "--region", "us-east-1"]


def _aws_env() -> dict[str, str]:
    return dict(
        os.environ,
        AWS_ACCESS_KEY_ID="any",
        AWS_SECRET_ACCESS_KEY="any",
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
    )


def test_aws_cli_ls_cp_and_sync_down(setup: Setup, aws: list[str], tmp_path: Path) -> None:
    base = f"s3://t/{setup.mount_id}"
    env = _aws_env()
    listed = subprocess.run(
        [*aws, "s3", "ls", f"{base}/"], env=env, capture_output=True, text=True, check=True
    )
    lines = listed.stdout.splitlines()
    assert "PRE small/" in [line.strip() for line in lines]
    assert any(line.endswith(f" {len(setup.data[BIG])} {BIG}") for line in lines)
    subprocess.run(
        [*aws, "s3", "cp", f"{base}/{MULTIPART}", str(tmp_path / "m.bin")],
        env=env,
        check=True,
        capture_output=True,
    )
    assert (tmp_path / "m.bin").read_bytes() == setup.data[MULTIPART]
    synced = tmp_path / "synced"
    subprocess.run(
        [*aws, "s3", "sync", f"{base}/small", str(synced)], env=env, check=True, capture_output=True
    )
    assert sorted(p.name for p in synced.iterdir()) == sorted(k.split("/")[1] for k in SMALL)
    for key in SMALL:
        assert (synced / key.split("/")[1]).read_bytes() == setup.data[key]
