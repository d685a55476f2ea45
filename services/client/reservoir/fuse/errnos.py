"""The errno a file system call returns for each of Reservoir's errors, and the log of
the failures a user would not expect."""

from __future__ import annotations

import errno
import functools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from reservoir.common import errors, logs

from .libfuse import load_mfusepy

log = logs.get_logger(__name__)

_FAILURE_LOG_INTERVAL_S = 1.0

# Most specific class first (DeadlineExceeded is an Unavailable, ReadOnly and
# Unauthenticated are PermissionDenied).
_ERRNO_BY_ERROR: tuple[tuple[type[BaseException], int], ...] = (
    (errors.NotFound, errno.ENOENT),
    (errors.IsADirectory, errno.EISDIR),
    (errors.NotADirectory, errno.ENOTDIR),
    (errors.AlreadyExists, errno.EEXIST),
    (errors.ReadOnly, errno.EROFS),
    (errors.PermissionDenied, errno.EACCES),
    (errors.Unsupported, errno.EOPNOTSUPP),
    (errors.InvalidArgument, errno.EINVAL),
    (errors.OutOfRange, errno.EINVAL),
    # The object changed under the read: the caller's view of the file is stale.
    (errors.Conflict, errno.ESTALE),
    (errors.ResourceExhausted, errno.EAGAIN),
    (errors.DeadlineExceeded, errno.ETIMEDOUT),
    (errors.Unavailable, errno.EIO),
    (errors.DataLoss, errno.EIO),
    (errors.Internal, errno.EIO),
)


def errno_for(error: BaseException) -> int:
    """The errno for `error`: by its Reservoir class, else its own errno, else EIO."""
    for cls, number in _ERRNO_BY_ERROR:
        if isinstance(error, cls):
            return number
    own = getattr(error, "errno", None)
    if isinstance(own, int) and own > 0:
        return own
    return errno.EIO


def is_expected(number: int) -> bool:
    """Errors a file system returns in normal use (a missing name), not worth a warning."""
    return number in (
        errno.ENOENT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EROFS,
        errno.EACCES,
        # What a writable mount refuses, logged once by the refusal itself.
        errno.EPERM,
        errno.EOPNOTSUPP,
        errno.ENOTEMPTY,
        errno.EEXIST,
    )


class FailureLog:
    """Warns of unexpected failures at most once per `interval_s` for each errno, with the
    count of those left out: in an outage every call fails, and the log should say so
    once a second, not thousands of times."""

    def __init__(self, interval_s: float = _FAILURE_LOG_INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._last: dict[int, float] = {}
        self._left_out: dict[int, int] = {}
        self._lock = threading.Lock()

    def failed(self, call: str, path: str, number: int, error: BaseException) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(number, -self._interval_s) < self._interval_s:
                self._left_out[number] = self._left_out.get(number, 0) + 1
                return
            self._last[number] = now
            left_out = self._left_out.pop(number, 0)
        log.warning(
            "fuse_call_failed",
            call=call,
            path=path,
            errno=errno.errorcode.get(number, number),
            error=str(error),
            similar_left_out=left_out,
        )


F = TypeVar("F", bound=Callable[..., Any])


def errno_of_failures(op: F) -> F:
    """Turns what a file system call raises into the errno FUSE returns, logging the
    failures a user would not expect (a cluster away, a bad block) with their fields."""

    @functools.wraps(op)
    def wrapper(self: Any, path: str, *args: Any) -> Any:
        mfusepy = load_mfusepy()  # imported once; here, so errno tables need no libfuse
        try:
            return op(self, path, *args)
        except mfusepy.FuseOSError:
            raise
        except Exception as exc:
            number = errno_for(exc)
            if not is_expected(number):
                self.failures.failed(op.__name__, path, number, exc)
            raise mfusepy.FuseOSError(number) from exc

    return cast(F, wrapper)
