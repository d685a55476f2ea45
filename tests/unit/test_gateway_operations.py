"""Every operation of S3's model, built by botocore's own serializer as an SDK sends it,
is either served by the gateway (the table below) or refused with NotImplemented naming
it; a served write takes no query parameter or header asking for what the gateway does
not provide."""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import botocore.config
import botocore.session
import pytest
from botocore import xform_name

from reservoir.common.errors import Unsupported
from reservoir.gateway.naming import Target
from reservoir.gateway.routes import Routes
from reservoir.gateway.s3_errors import S3Error, from_reservoir

# The operations the gateway serves: each request of these forms reaches its handler.
SERVED = {
    "ListBuckets",
    "HeadBucket",
    "GetBucketLocation",
    "ListObjects",
    "ListObjectsV2",
    "GetObject",
    "HeadObject",
    "PutObject",
    "CopyObject",
    "DeleteObject",
    "DeleteObjects",
    "CreateMultipartUpload",
    "UploadPart",
    "UploadPartCopy",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
    "ListParts",
    "ListMultipartUploads",
}
# Pairs S3 sends in one wire form: a request of either is the first's.
SAME_FORM = {
    "ListDirectoryBuckets": "ListBuckets",
    "GetBucketLifecycle": "GetBucketLifecycleConfiguration",
    "GetBucketNotification": "GetBucketNotificationConfiguration",
    "PutBucketLifecycle": "PutBucketLifecycleConfiguration",
    "PutBucketNotification": "PutBucketNotificationConfiguration",
}


@dataclass(frozen=True)
class Sent:
    method: str
    target: Target
    query: dict[str, str]
    headers: dict[str, str]


class _Captured(Exception):
    pass


def _value(shape: Any, depth: int = 0) -> Any:
    """A value of `shape` with its required members (enough for the serializer)."""
    kind = shape.type_name
    if kind == "structure":
        members = shape.required_members if depth < 4 else []
        return {m: _value(shape.members[m], depth + 1) for m in members}
    return {
        "list": [],
        "map": {},
        "integer": 1,
        "long": 1,
        "boolean": True,
        "timestamp": datetime.datetime(2030, 1, 1),
        "blob": b"x",
    }.get(kind, shape.enum[0] if getattr(shape, "enum", None) else "x")


def _sent_requests() -> Iterator[tuple[str, Sent]]:
    client = botocore.session.get_session().create_client(
        "s3",
        region_name="us-east-1",
        endpoint_url="http://gateway.test:9000",
        aws_access_key_id="any",
        aws_secret_access_key="any",
        config=botocore.config.Config(
            parameter_validation=False,
            s3={"addressing_style": "path"},
            retries={"max_attempts": 0},
        ),
    )
    captured: list[Any] = []

    def capture(request: Any, **_: Any) -> None:
        captured.append(request)
        raise _Captured

    client.meta.events.register("before-send.s3", capture)
    model = client.meta.service_model
    for name in model.operation_names:
        operation = model.operation_model(name)
        shape = operation.input_shape
        params = {m: _value(shape.members[m]) for m in shape.required_members} if shape else {}
        params.update(
            {
                k: v
                for k, v in (("Bucket", "b"), ("Key", "dir/k"), ("CopySource", "b/src"))
                if k in params
            }
        )
        with pytest.raises(_Captured):
            getattr(client, xform_name(name))(**params)
        request = captured.pop()
        url = urlsplit(request.url)
        raw = url.path + ("?" + url.query if url.query else "")
        yield (
            name,
            Sent(
                request.method,
                Target.of(raw, url.netloc, ""),
                dict(parse_qsl(url.query, keep_blank_values=True)),
                {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()},
            ),
        )


ROUTES: Routes[str] = Routes({name: name for name in SERVED})
REQUESTS = dict(_sent_requests())


def test_the_model_has_every_operation_the_gateway_serves() -> None:
    assert len(REQUESTS) > 100
    assert set(REQUESTS) >= SERVED


@pytest.mark.parametrize("operation", sorted(REQUESTS))
def test_every_operation_of_s3s_model_is_served_or_refused_by_name(operation: str) -> None:
    sent = REQUESTS[operation]
    named = SAME_FORM.get(operation, operation)
    if named in SERVED:
        route = ROUTES.route(sent.method, sent.target, sent.query, sent.headers)
        assert route.handler == named
    else:
        with pytest.raises(S3Error) as exc:
            ROUTES.route(sent.method, sent.target, sent.query, sent.headers)
        assert (exc.value.code, exc.value.status) == ("NotImplemented", 501)
        if operation != "WriteGetObjectResponse":  # an Object Lambda endpoint's path
            assert named in exc.value.message


@pytest.mark.parametrize(
    "operation",
    [
        "PutObjectAcl",
        "PutObjectTagging",
        "DeleteObjectTagging",
        "PutObjectRetention",
        "PutObjectLegalHold",
        "RestoreObject",
        "SelectObjectContent",
        "PutBucketPolicy",
    ],
)
def test_the_calls_that_destroyed_objects_never_reach_a_write(operation: str) -> None:
    sent = REQUESTS[operation]
    with pytest.raises(S3Error) as exc:
        ROUTES.route(sent.method, sent.target, sent.query, sent.headers)
    assert exc.value.status == 501 and operation in exc.value.message


def _route(method: str, key: str, query: Mapping[str, str], headers: Mapping[str, str]) -> str:
    return ROUTES.route(method, Target("b", key), query, headers).handler


@pytest.mark.parametrize(
    ("method", "query", "headers"),
    [
        ("PUT", {"uploadId": "u"}, {}),  # an UploadPart without its part number
        ("PUT", {"foo": ""}, {}),  # a subresource S3's model does not know (yet)
        ("DELETE", {"versionId": "3"}, {}),  # one version: Reservoir keeps one
        ("GET", {"partNumber": "1"}, {}),  # a part of the object: not what it serves
        ("PUT", {}, {"x-amz-server-side-encryption": "aws:kms"}),
        ("PUT", {}, {"x-amz-server-side-encryption-customer-algorithm": "AES256"}),
        ("PUT", {}, {"x-amz-storage-class": "GLACIER"}),
        ("PUT", {}, {"x-amz-tagging": "a=b"}),
        ("PUT", {}, {"x-amz-object-lock-mode": "COMPLIANCE"}),
        ("PUT", {}, {"x-amz-object-lock-legal-hold": "ON"}),
        ("PUT", {}, {"x-amz-acl": "public-read"}),
        ("PUT", {}, {"x-amz-grant-read": "id=someone"}),
        ("POST", {"uploads": ""}, {"x-amz-storage-class": "DEEP_ARCHIVE"}),
        ("PUT", {}, {"x-amz-copy-source": "b/src", "x-amz-tagging-directive": "REPLACE"}),
    ],
)
def test_a_served_operation_asking_for_more_than_it_provides_is_refused_naming_it(
    method: str, query: dict[str, str], headers: dict[str, str]
) -> None:
    with pytest.raises(S3Error) as exc:
        _route(method, "k", query, headers)
    assert (exc.value.code, exc.value.status) == ("NotImplemented", 501)
    named = [*query, *headers]
    assert any(name in exc.value.message for name in named)


def test_what_the_gateway_provides_anyway_is_served() -> None:
    assert _route("PUT", "k", {}, {"x-amz-storage-class": "STANDARD"}) == "PutObject"
    assert _route("PUT", "k", {}, {"x-amz-acl": "private"}) == "PutObject"
    assert _route("PUT", "k", {"x-id": "PutObject"}, {}) == "PutObject"
    presigned = {"X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Signature": "00"}
    assert _route("PUT", "k", presigned, {}) == "PutObject"
    assert _route("GET", "k", {"response-content-type": "text/plain"}, {}) == "GetObject"
    assert _route("GET", "k", {"uploadId": "u"}, {}) == "ListParts"
    assert _route("GET", "", {"uploads": "", "prefix": "a/"}, {}) == "ListMultipartUploads"


def test_a_served_operation_missing_what_s3_requires_is_an_invalid_request() -> None:
    with pytest.raises(S3Error) as exc:
        _route("POST", "k", {}, {})  # a completion without its upload id
    assert (exc.value.code, exc.value.status) == ("InvalidRequest", 400)
    assert "uploadId" in exc.value.message


def test_what_a_mounts_store_cannot_do_is_not_implemented_not_a_missing_bucket() -> None:
    error = from_reservoir(Unsupported("an http(s) mount cannot be listed"), "t", "")
    assert (error.code, error.status) == ("NotImplemented", 501)
    assert "cannot be listed" in error.message
