"""Which handler answers a request, or why none does.

Every request is named by S3's operation table (operations.py). An operation the gateway
does not serve is refused with NotImplemented naming it; so is a served one asking for
what the gateway does not provide (a query parameter it does not handle, a header such as
`x-amz-server-side-encryption` or `x-amz-tagging`): refusing is safe, a silent 200 that
dropped the ask is not. A write takes no query parameter it does not handle, even one S3's
model does not know, so no request can reach a write it was not meant for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from .naming import Target
from .operations import Level, OperationShape, OperationTable
from .s3_errors import S3Error, not_implemented

Handler = TypeVar("Handler")

WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})

# The query parameters each served write handles (S3's wire names); any other is refused.
_WRITE_QUERY: dict[str, frozenset[str]] = {
    "PutObject": frozenset(),
    "CopyObject": frozenset(),
    "DeleteObject": frozenset(),
    "DeleteObjects": frozenset({"delete"}),
    "CreateMultipartUpload": frozenset({"uploads"}),
    "UploadPart": frozenset({"partNumber", "uploadId"}),
    "UploadPartCopy": frozenset({"partNumber", "uploadId"}),
    "CompleteMultipartUpload": frozenset({"uploadId"}),
    "AbortMultipartUpload": frozenset({"uploadId"}),
}
# Query parameters of S3's model a served read does not handle: answering without them
# would be a wrong answer (a part of a multipart object, an old version).
_READ_REFUSED_QUERY: dict[str, frozenset[str]] = {
    "GetObject": frozenset({"partNumber", "versionId"}),
    "HeadObject": frozenset({"partNumber", "versionId"}),
}

# Headers asking for what the gateway does not provide, with the values it does provide
# (empty: none). Prefixes end with "-".
_REFUSED_HEADERS: dict[str, frozenset[str]] = {
    "x-amz-server-side-encryption": frozenset(),
    "x-amz-server-side-encryption-": frozenset(),
    "x-amz-copy-source-server-side-encryption-": frozenset(),
    "x-amz-storage-class": frozenset({"STANDARD"}),
    "x-amz-tagging": frozenset(),
    "x-amz-tagging-directive": frozenset({"COPY"}),
    "x-amz-object-lock-mode": frozenset(),
    "x-amz-object-lock-retain-until-date": frozenset(),
    "x-amz-object-lock-legal-hold": frozenset(),
    "x-amz-website-redirect-location": frozenset(),
    # Objects behind the gateway belong to the cluster: no grants to anyone else.
    "x-amz-acl": frozenset({"private", "bucket-owner-full-control"}),
    "x-amz-grant-": frozenset(),
    "x-amz-write-offset-bytes": frozenset(),
}


def _transport(name: str) -> bool:
    """Query parameters of the request's transport, not of any operation: a presigned
    URL's signature (X-Amz-*) and the AWS SDKs' `x-id` operation hint."""
    return name == "x-id" or name.lower().startswith("x-amz-")


def refused_header(headers: Mapping[str, str]) -> str | None:
    """The first header asking for what the gateway does not provide, as `name: value`."""
    for raw_name, value in headers.items():
        name = raw_name.lower()
        for refused, allowed in _REFUSED_HEADERS.items():
            hit = name.startswith(refused) if refused.endswith("-") else name == refused
            if hit and value.strip() not in allowed:
                return f"{raw_name}: {value}"
    return None


def level_of(target: Target) -> Level:
    if not target.bucket:
        return Level.SERVICE
    return Level.OBJECT if target.key else Level.BUCKET


@dataclass(frozen=True)
class Route(Generic[Handler]):
    operation: str
    handler: Handler


class Routes(Generic[Handler]):
    """The served operations' handlers, by S3 operation name."""

    def __init__(
        self, handlers: Mapping[str, Handler], table: OperationTable | None = None
    ) -> None:
        self._handlers = dict(handlers)
        self.table = table or OperationTable.from_botocore(self._handlers)

    def operation(
        self, method: str, target: Target, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> OperationShape | None:
        """The S3 operation a request is; None when it has the form of none."""
        return self.table.classify(method, level_of(target), query, headers.keys())

    def route(
        self, method: str, target: Target, query: Mapping[str, str], headers: Mapping[str, str]
    ) -> Route[Handler]:
        return self.handler_for(
            self.operation(method, target, query, headers), method, target, query, headers
        )

    def handler_for(
        self,
        shape: OperationShape | None,
        method: str,
        target: Target,
        query: Mapping[str, str],
        headers: Mapping[str, str],
    ) -> Route[Handler]:
        """The handler of a request named `shape`; NotImplemented (501) naming the
        operation, query parameter or header the gateway does not serve; InvalidRequest
        (400) for a served operation missing a member S3 requires."""
        if shape is None:
            raise not_implemented(f"{method} of a {level_of(target).value} with this query")
        handler = self._handlers.get(shape.name)
        if handler is None:
            raise not_implemented(shape.name)
        writes = method in WRITE_METHODS
        _check_query(shape, query, writes)
        header = refused_header(headers)
        if header is not None:
            raise not_implemented(f"{shape.name} with {header}")
        missing = shape.missing(query, headers.keys())
        if missing:
            raise S3Error(
                "InvalidRequest",
                400,
                f"{shape.name} requires {', '.join(missing)}, which the request lacks.",
            )
        return Route(shape.name, handler)


def _check_query(shape: OperationShape, query: Mapping[str, str], writes: bool) -> None:
    for name in query:
        if _transport(name):
            continue
        if writes:
            refused = name not in _WRITE_QUERY.get(shape.name, frozenset())
        else:
            refused = name in _READ_REFUSED_QUERY.get(shape.name, frozenset())
        if refused:
            raise not_implemented(f"{shape.name} with ?{name}")
