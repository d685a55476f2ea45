"""S3's errors as the gateway answers them: one exception carrying S3's code, HTTP status
and message, and one table translating Reservoir's errors into them."""

from __future__ import annotations

from reservoir.common.errors import (
    DeadlineExceeded,
    InvalidArgument,
    IsADirectory,
    NotADirectory,
    NotFound,
    PermissionDenied,
    Unavailable,
    Unsupported,
)

# Where a request keeps its id (the x-amz-request-id header and every error's RequestId).
REQUEST_ID = "reservoir_request_id"


class S3Error(Exception):
    """An S3 error response: `code` is S3's (NoSuchKey, InvalidRange, ...); `fields` are
    the extra elements S3 puts in the XML body (Key, BucketName, ActualObjectSize...)."""

    def __init__(
        self,
        code: str,
        status: int,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        **fields: str,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.fields = fields


def no_such_key(key: str) -> S3Error:
    return S3Error("NoSuchKey", 404, "The specified key does not exist.", Key=key)


def no_such_bucket(bucket: str) -> S3Error:
    return S3Error("NoSuchBucket", 404, "The specified bucket does not exist", BucketName=bucket)


def access_denied() -> S3Error:
    return S3Error("AccessDenied", 403, "Access Denied")


def invalid_argument(message: str, name: str = "", value: str = "") -> S3Error:
    if not name:
        return S3Error("InvalidArgument", 400, message)
    return S3Error("InvalidArgument", 400, message, ArgumentName=name, ArgumentValue=value)


def not_implemented(what: str) -> S3Error:
    return S3Error(
        "NotImplemented",
        501,
        f"A header or query you provided implies functionality that is not implemented ({what}).",
    )


def precondition_failed(condition: str) -> S3Error:
    return S3Error(
        "PreconditionFailed",
        412,
        "At least one of the pre-conditions you specified did not hold",
        Condition=condition,
    )


def invalid_range(size: int, requested: str) -> S3Error:
    return S3Error(
        "InvalidRange",
        416,
        "The requested range is not satisfiable",
        headers={"Content-Range": f"bytes */{size}"},
        ActualObjectSize=str(size),
        RangeRequested=requested,
    )


def from_reservoir(error: Exception, bucket: str, key: str) -> S3Error:
    """What an S3 client sees of an error of the cluster while serving `bucket`/`key`."""
    if isinstance(error, Unsupported):  # e.g. listing an http(s) mount
        return S3Error("NotImplemented", 501, str(error))
    if isinstance(error, (NotFound, IsADirectory, NotADirectory, InvalidArgument)):
        # A path the namespace cannot hold, a directory, a name below a file: no such key.
        return no_such_key(key) if key else no_such_bucket(bucket)
    if isinstance(error, PermissionDenied):
        return access_denied()
    if isinstance(error, (Unavailable, DeadlineExceeded)):
        return S3Error("ServiceUnavailable", 503, "Reduce your request rate.")
    return S3Error("InternalError", 500, "We encountered an internal error. Please try again.")
