"""The errno a program reading through the FUSE mount sees for each Reservoir error."""

from __future__ import annotations

import errno
import logging
import time

import pytest

from reservoir.common import errors
from reservoir.fuse.errnos import FailureLog, errno_for


@pytest.mark.parametrize(
    ("error", "number"),
    [
        (errors.NotFound("/d/x: no such file or directory"), errno.ENOENT),
        (errors.IsADirectory("/d: is a directory"), errno.EISDIR),
        (errors.NotADirectory("/d/f: not a directory"), errno.ENOTDIR),
        (errors.PermissionDenied("no"), errno.EACCES),
        (errors.Unauthenticated("no token"), errno.EACCES),
        (errors.ReadOnly("a write to reservoir://"), errno.EROFS),
        (errors.InvalidArgument("bad path"), errno.EINVAL),
        (errors.Unsupported("an http(s) mount cannot be listed"), errno.EOPNOTSUPP),
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


def test_an_outage_is_logged_once_per_interval_with_the_count_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = FailureLog(interval_s=60.0)
    outage = errors.Unavailable("master at 10.0.0.1:19998 is unreachable")
    with caplog.at_level(logging.WARNING, logger="reservoir.fuse.errnos"):
        for n in range(500):
            failures.failed("read", f"/d/f{n}", errno.EIO, outage)
        failures.failed("getattr", "/d", errno.ETIMEDOUT, errors.DeadlineExceeded("slow"))
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2
    assert warned[0].startswith("fuse_call_failed") and "errno=EIO" in warned[0]
    assert "errno=ETIMEDOUT" in warned[1]
    failures = FailureLog(interval_s=0.2)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="reservoir.fuse.errnos"):
        for n in range(10):
            failures.failed("read", f"/d/f{n}", errno.EIO, outage)
        time.sleep(0.25)
        failures.failed("read", "/d/again", errno.EIO, outage)
    assert len(caplog.records) == 2
    assert "similar_left_out=9" in caplog.records[-1].getMessage()
