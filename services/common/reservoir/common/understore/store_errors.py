"""The one error table of the under-stores: what a store's answer means, as a domain error.

Every backend reduces its SDK's failure to an HTTP status and the store's error code (S3's
`NoSuchKey`, Azure's `BlobNotFound`, WebHDFS's exception name, ...) or, for obstore, to its
exception class; this table chooses the domain error (and so the gRPC status) and words
the message (a backend decides only which failures are worth another attempt): what was refused, by which endpoint, under which credential source. Never a
credential itself, and never the SDK's whole message, which may quote request headers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from reservoir.common.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ReservoirError,
    ResourceExhausted,
    SlowDown,
    Unavailable,
)

# A store's own name for a failure (S3's and Azure's error codes, the Java exception a
# WebHDFS RemoteException names) says more than its HTTP status: it decides when known.
_BY_CODE: dict[str, type[ReservoirError]] = {
    **dict.fromkeys(
        ("NoSuchKey", "NoSuchBucket", "NotFound", "BlobNotFound", "ContainerNotFound"), NotFound
    ),
    **dict.fromkeys(
        ("AccessDenied", "Forbidden", "InvalidAccessKeyId", "AuthorizationFailure"),
        PermissionDenied,
    ),
    **dict.fromkeys(("PreconditionFailed", "ConditionNotMet"), Conflict),
    **dict.fromkeys(("SlowDown", "Throttling", "ServerBusy", "TooManyRequests"), SlowDown),
    "InvalidRange": OutOfRange,
    "BlobAlreadyExists": AlreadyExists,
    # WebHDFS (HDFS answers any IOException it has no better status for with 403).
    "FileNotFoundException": NotFound,
    **dict.fromkeys(
        ("AccessControlException", "SecurityException", "AuthorizationException"),
        PermissionDenied,
    ),
    "FileAlreadyExistsException": AlreadyExists,
    "EOFException": OutOfRange,
    **dict.fromkeys(
        (
            "IllegalArgumentException",
            "HadoopIllegalArgumentException",
            "UnsupportedOperationException",
            "InvalidPathException",
            "ParentNotDirectoryException",
            "PathIsNotEmptyDirectoryException",
        ),
        InvalidArgument,
    ),
    **dict.fromkeys(
        ("QuotaExceededException", "DSQuotaExceededException", "NSQuotaExceededException"),
        ResourceExhausted,
    ),
}
_STATUS = re.compile(r"\bstatus(?: code)?: (\d{3})\b")


@dataclass(frozen=True, slots=True)
class StorePlace:
    """How an error names the store: its endpoint and the credential source in use."""

    endpoint: str
    credentials: str

    @property
    def where(self) -> str:
        return f"the under-store at {self.endpoint}"


def known_code(code: str) -> bool:
    return code in _BY_CODE


def error_for_status(
    place: StorePlace, what: str, status: int, code: str = "", detail: str = ""
) -> ReservoirError:
    """The domain error for a store's answer `status` (0 when unknown) with error `code`
    (the store's own name for the failure, which decides when this table knows it);
    `detail`, the store's words, is added to the message (never a credential)."""
    where = place.where
    shown = code or str(status)
    said = f" ({detail})" if detail else ""
    kind = _BY_CODE.get(code)
    if kind is NotFound or (kind is None and status in (404, 410)):
        return NotFound(f"{what}: not found in {where}{said}")
    if kind is PermissionDenied or (kind is None and status in (401, 403)):
        return PermissionDenied(
            f"{what}: access denied by {where} ({shown}; credential source "
            f"{place.credentials!r}){said}"
        )
    if kind is Conflict or (kind is None and status == 412):
        return Conflict(f"{what}: the object changed (its change token differs){said}")
    if kind is OutOfRange or (kind is None and status == 416):
        return OutOfRange(f"{what}: range not satisfiable{said}")
    if kind is SlowDown or (kind is None and status in (429, 503)):
        return SlowDown(f"{what}: {where} answered {shown} (slow down){said}")
    if kind is AlreadyExists:
        return AlreadyExists(f"{what}: already exists in {where}{said}")
    if kind is ResourceExhausted:
        return ResourceExhausted(f"{what}: {where} is over a quota ({shown}){said}")
    if kind is InvalidArgument or (kind is None and status == 400):
        return InvalidArgument(f"{what}: {where} refused the request ({shown}){said}")
    return Unavailable(f"{what}: {where} answered {shown}{said}")


def error_for_obstore(place: StorePlace, what: str, exc: BaseException) -> ReservoirError:
    """The domain error for an obstore (Rust `object_store`) failure."""
    from obstore import exceptions as ox

    if isinstance(exc, ReservoirError):
        return exc
    if isinstance(exc, ox.NotFoundError | FileNotFoundError):
        return NotFound(f"{what}: not found in {place.where}")
    if isinstance(exc, ox.PermissionDeniedError | ox.UnauthenticatedError | PermissionError):
        return error_for_status(place, what, 403)
    if isinstance(exc, ox.PreconditionError | ox.NotModifiedError):
        return Conflict(f"{what}: the object changed (its change token differs)")
    if isinstance(exc, ox.AlreadyExistsError):
        return AlreadyExists(f"{what}: already exists in {place.where}")
    # obstore words the rest: the status alone is read from its message (which also holds
    # the elapsed time and the server's error body, where any number may stand).
    message = str(exc)
    status = _STATUS.search(message)
    if status is not None and status.group(1) in ("416", "429", "503"):
        return error_for_status(place, what, int(status.group(1)))
    if "SlowDown" in message:
        return error_for_status(place, what, 503, "SlowDown")
    if "error sending request" in message or "connect" in message.lower():
        return Unavailable(
            f"{what}: cannot connect to the under-store endpoint {place.endpoint} "
            f"({first_line(exc)})"
        )
    return Unavailable(f"{what}: {place.where}: {type(exc).__name__}: {first_line(exc)}")


def first_line(exc: BaseException) -> str:
    """obstore's messages carry a multi-line debug dump: the first line says what failed."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
