"""The errno a file system call returns for each of Reservoir's errors."""

from __future__ import annotations

import errno

from reservoir.common import errors

# Most specific class first (DeadlineExceeded is an Unavailable, Unauthenticated a
# PermissionDenied).
_ERRNO_BY_ERROR: tuple[tuple[type[BaseException], int], ...] = (
    (errors.NotFound, errno.ENOENT),
    (errors.IsADirectory, errno.EISDIR),
    (errors.NotADirectory, errno.ENOTDIR),
    (errors.AlreadyExists, errno.EEXIST),
    (errors.PermissionDenied, errno.EACCES),
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
    return number in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EROFS, errno.EACCES)
