"""The errno a program reading through the FUSE mount sees for each Reservoir error."""

from __future__ import annotations

import errno

import pytest

from reservoir.common import errors
from reservoir.fuse.errnos import errno_for


@pytest.mark.parametrize(
    ("error", "number"),
    [
        (errors.NotFound("/d/x: no such file or directory"), errno.ENOENT),
        (errors.IsADirectory("/d: is a directory"), errno.EISDIR),
        (errors.NotADirectory("/d/f: not a directory"), errno.ENOTDIR),
        (errors.PermissionDenied("no"), errno.EACCES),
        (errors.Unauthenticated("no token"), errno.EACCES),
        (errors.InvalidArgument("bad path"), errno.EINVAL),
        (errors.Conflict("etag changed"), errno.ESTALE),
        (errors.DeadlineExceeded("slow"), errno.ETIMEDOUT),
        (errors.Unavailable("master away"), errno.EIO),
        (errors.DataLoss("bad crc"), errno.EIO),
        (errors.Internal("bug"), errno.EIO),
        (OSError(errno.ENOSPC, "full"), errno.ENOSPC),
        (RuntimeError("anything else"), errno.EIO),
    ],
)
def test_each_error_becomes_the_errno_a_program_expects(error: Exception, number: int) -> None:
    assert errno_for(error) == number
