"""The one error model: domain errors, the table that maps them to gRPC codes, and back.

Services raise `ReservoirError` subclasses (chained with ``from``). Servers translate them
to a gRPC status through `STATUS_BY_ERROR`; clients turn the status back into the same
class, which is also a Python built-in where one fits (``FileNotFoundError`` ...), so
callers can write ordinary ``except FileNotFoundError``.
"""

from __future__ import annotations

import grpc


class ReservoirError(Exception):
    """Base of every error Reservoir raises on purpose."""


class NotFound(ReservoirError, FileNotFoundError):
    """A path, mount, object or worker does not exist."""


class IsADirectory(ReservoirError, IsADirectoryError):
    """A file operation was asked of a directory."""


class NotADirectory(ReservoirError, NotADirectoryError):
    """A directory operation was asked of a file."""


class InvalidArgument(ReservoirError, ValueError):
    """The request itself is malformed: bad path, bad URI, bad option."""


class Unsupported(InvalidArgument):
    """What the path's store cannot do in any form (list an http(s) mount, which HTTP
    cannot): the FUSE mount answers EOPNOTSUPP, the S3 gateway NotImplemented."""


class OutOfRange(ReservoirError, ValueError):
    """An offset or length lies outside what exists."""


class AlreadyExists(ReservoirError, FileExistsError):
    """A mount point or path is already taken."""


class Conflict(ReservoirError):
    """The object changed under us (ETag mismatch); retry with fresh metadata."""


class PermissionDenied(ReservoirError, PermissionError):
    """The under-store or the cluster refused the caller."""


class Unauthenticated(PermissionDenied):
    """No credentials, or credentials the cluster does not know."""


class ReadOnly(PermissionDenied):
    """A write to what Reservoir only reads (`reservoir://`, the FUSE mount)."""


class ResourceExhausted(ReservoirError):
    """A quota or capacity would be exceeded."""


class Unavailable(ReservoirError, ConnectionError):
    """A component (master, worker, etcd, under-store) cannot be reached in time."""


class SlowDown(Unavailable):
    """The under-store asks for fewer requests (S3's 503 SlowDown): back off, then retry."""


class NotLeader(Unavailable):
    """This master is a standby (or was fenced off): the call needs the leader.
    `leader` is the leader's address when known; clients go there."""

    def __init__(self, message: str, leader: str = "") -> None:
        super().__init__(message)
        self.leader = leader


class NotAMaster(Unavailable):
    """The address given as a master's answers, but as something else (a worker, etcd,
    an HTTP server): raised by the caller, never sent by a server."""


class DeadlineExceeded(Unavailable, TimeoutError):
    """A call ran past its deadline."""


class DataLoss(ReservoirError):
    """Stored bytes failed verification."""


class Internal(ReservoirError):
    """A bug or an unexpected failure inside a component."""


# Order matters for `status_for`: the most specific class first.
STATUS_BY_ERROR: tuple[tuple[type[ReservoirError], grpc.StatusCode], ...] = (
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (IsADirectory, grpc.StatusCode.FAILED_PRECONDITION),
    (NotADirectory, grpc.StatusCode.FAILED_PRECONDITION),
    (OutOfRange, grpc.StatusCode.OUT_OF_RANGE),
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (Unsupported, grpc.StatusCode.INVALID_ARGUMENT),  # (after: a bare code is InvalidArgument)
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (Conflict, grpc.StatusCode.ABORTED),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (NotLeader, grpc.StatusCode.UNAVAILABLE),
    (NotAMaster, grpc.StatusCode.UNAVAILABLE),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (DataLoss, grpc.StatusCode.DATA_LOSS),
    (Internal, grpc.StatusCode.INTERNAL),
)

# FAILED_PRECONDITION is shared by two classes; the error's kind travels in the
# trailing metadata so the client can tell them apart.
ERROR_KIND_KEY = "reservoir-error"
# Where a standby says which master leads (NotLeader): the caller goes there.
LEADER_KEY = "reservoir-leader"
_BY_NAME: dict[str, type[ReservoirError]] = {cls.__name__: cls for cls, _ in STATUS_BY_ERROR}
_BY_CODE: dict[grpc.StatusCode, type[ReservoirError]] = {}
for _cls, _code in STATUS_BY_ERROR:
    if _cls not in (NotLeader, NotAMaster):  # a bare UNAVAILABLE is Unavailable
        _BY_CODE.setdefault(_code, _cls)


def status_for(error: BaseException) -> grpc.StatusCode:
    for cls, code in STATUS_BY_ERROR:
        if isinstance(error, cls):
            return code
    return grpc.StatusCode.INTERNAL


def error_for(code: grpc.StatusCode, message: str, kind: str | None = None) -> ReservoirError:
    """The domain error a client raises for a gRPC status."""
    cls = _BY_NAME.get(kind or "") or _BY_CODE.get(code)
    if cls is None:
        if code == grpc.StatusCode.CANCELLED:
            return Unavailable(f"call cancelled: {message}")
        cls = Internal
    return cls(message)


def error_for_code_value(value: int, message: str) -> ReservoirError:
    """Same as `error_for`, from the integer code carried inside batch responses."""
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return error_for(code, message)
    return Internal(message)


def code_value(error: BaseException) -> int:
    return int(status_for(error).value[0])
