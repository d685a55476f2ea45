"""The S3 operations that write: PutObject, multipart uploads, DeleteObject(s),
CopyObject, CreateBucket, DeleteBucket. All of them arrive here, and only here.

Reservoir's write path (writable mounts) is not in this build yet, so each answers S3's
NotImplemented (501), after the same role check a real write will make: a reader's key
is refused (AccessDenied) first. Wiring the write path in means replacing
`write_operation`'s last line with a dispatch on `operation_name`."""

from __future__ import annotations

from collections.abc import Mapping

from .naming import Target
from .s3_errors import S3Error, access_denied, not_implemented
from .signatures import AccessKey

WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})


def operation_name(
    method: str, target: Target, query: Mapping[str, str], headers: Mapping[str, str]
) -> str:
    """Which S3 write operation a request is (S3's API names)."""
    if not target.key:
        if method == "POST" and "delete" in query:
            return "DeleteObjects"
        return {"PUT": "CreateBucket", "DELETE": "DeleteBucket"}.get(method, "PostObject")
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        return "CompleteMultipartUpload" if "uploadId" in query else "PostObject"
    if method == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
    if "uploadId" in query:
        return "UploadPartCopy" if "x-amz-copy-source" in headers else "UploadPart"
    return "CopyObject" if "x-amz-copy-source" in headers else "PutObject"


def write_operation(
    method: str,
    target: Target,
    query: Mapping[str, str],
    headers: Mapping[str, str],
    signer: AccessKey | None,
) -> S3Error:
    """The error a write request gets (for now, every one gets one). `signer` None: the
    gateway checks no signatures (a cluster without authentication)."""
    if signer is not None and not signer.may_write:
        return access_denied()
    return not_implemented(operation_name(method, target, query, headers))
