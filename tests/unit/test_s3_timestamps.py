"""The S3 under-store's timestamp reader says what botocore's own says, in every form a
response carries (ISO 8601 in listings, RFC 1123 in headers, epoch seconds)."""

from __future__ import annotations

import pytest
from botocore.parsers import DEFAULT_TIMESTAMP_PARSER

from reservoir.common.understore.s3_under_store import _timestamp


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-02T05:22:12.123Z",
        "2026-12-02T05:22:12Z",
        "2026-12-02T05:22:12.000+00:00",
        "2026-12-02T05:22:12",
        "Wed, 02 Dec 2026 05:22:12 GMT",
        1764652932,
        "1764652932.5",
    ],
)
def test_a_timestamp_reads_as_botocore_reads_it(value: str | int) -> None:
    ours, theirs = _timestamp(value), DEFAULT_TIMESTAMP_PARSER(value)
    assert ours == theirs and (ours.tzinfo is None) == (theirs.tzinfo is None)
    assert ours.timestamp() == theirs.timestamp()
