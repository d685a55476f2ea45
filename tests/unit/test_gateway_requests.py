"""What the S3 gateway makes of a request before it touches the cluster: the target
(bucket, key, path), the Range and conditional headers as S3 reads them, and its
settings."""

from __future__ import annotations

import datetime

import pytest

from reservoir.common import config as cfg
from reservoir.common.errors import InvalidArgument
from reservoir.common.models import Inode
from reservoir.gateway.key_walk import _name_before
from reservoir.gateway.naming import Target
from reservoir.gateway.object_headers import ByteRange, byte_range, check_conditions
from reservoir.gateway.s3_errors import S3Error

MTIME = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
INODE = Inode("/b/k", False, size=100, mtime_ms=int(MTIME.timestamp() * 1000), etag="abc")


def _http_date(moment: datetime.datetime) -> str:
    return moment.strftime("%a, %d %b %Y %H:%M:%S GMT")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-9", ByteRange(0, 9)),
        ("bytes=90-", ByteRange(90, 99)),
        ("bytes=-10", ByteRange(90, 99)),
        ("bytes=-500", ByteRange(0, 99)),  # a suffix longer than the object: all of it
        ("bytes=50-5000", ByteRange(50, 99)),  # clipped to the object
        ("bytes=9-3", None),  # last before first: ignored, the whole object
        ("bytes=0-1,5-6", None),  # several ranges: S3 ignores the header
        ("items=0-1", None),
        ("bytes=-", None),
    ],
)
def test_a_range_header_is_read_as_s3_reads_it(
    header: str | None, expected: ByteRange | None
) -> None:
    assert byte_range(header, 100) == expected


@pytest.mark.parametrize(
    ("header", "size"), [("bytes=100-", 100), ("bytes=-0", 100), ("bytes=0-", 0), ("bytes=-5", 0)]
)
def test_a_range_with_no_byte_in_the_object_is_invalid_range_416(header: str, size: int) -> None:
    with pytest.raises(S3Error) as exc:
        byte_range(header, size)
    assert (exc.value.code, exc.value.status) == ("InvalidRange", 416)
    assert exc.value.headers == {"Content-Range": f"bytes */{size}"}


def test_conditions_follow_s3s_precedence() -> None:
    before, after = (
        _http_date(MTIME - datetime.timedelta(days=1)),
        _http_date(MTIME + datetime.timedelta(days=1)),
    )
    assert check_conditions({}, INODE) is None
    assert check_conditions({"If-Match": '"abc"'}, INODE) is None
    assert check_conditions({"If-Match": "*"}, INODE) is None
    assert check_conditions({"If-None-Match": '"abc"'}, INODE) == 304
    assert check_conditions({"If-None-Match": '"other"'}, INODE) is None
    assert check_conditions({"If-Modified-Since": after}, INODE) == 304
    assert check_conditions({"If-Modified-Since": _http_date(MTIME)}, INODE) == 304
    assert check_conditions({"If-Modified-Since": before}, INODE) is None
    assert check_conditions({"If-Modified-Since": "not a date"}, INODE) is None
    # If-None-Match decides alone when both are given.
    assert check_conditions({"If-None-Match": '"other"', "If-Modified-Since": after}, INODE) is None
    # If-Match holding wins over If-Unmodified-Since failing.
    assert check_conditions({"If-Match": '"abc"', "If-Unmodified-Since": before}, INODE) is None
    for failing in ({"If-Match": '"other"'}, {"If-Unmodified-Since": before}):
        with pytest.raises(S3Error) as exc:
            check_conditions(failing, INODE)
        assert (exc.value.code, exc.value.status) == ("PreconditionFailed", 412)


@pytest.mark.parametrize(
    ("raw", "host", "domain", "target", "path"),
    [
        ("/", "gw:9000", "", Target("", ""), None),
        ("/b", "gw:9000", "", Target("b", ""), None),
        ("/b/", "gw", "", Target("b", ""), None),
        ("/b/dir/x%20y.bin?list-type=2", "gw", "", Target("b", "dir/x y.bin"), "/b/dir/x y.bin"),
        ("/b/a%2Fb", "gw", "", Target("b", "a/b"), "/b/a/b"),
        ("/b/a//b", "gw", "", Target("b", "a//b"), None),
        ("/b/a/../c", "gw", "", Target("b", "a/../c"), None),
        ("/b/dir/", "gw", "", Target("b", "dir/"), None),
        ("/k/x", "b.s3.local:9000", "s3.local", Target("b", "k/x"), "/b/k/x"),
        ("/", "b.s3.local", "s3.local", Target("b", ""), None),
        ("/b/k", "127.0.0.1:9000", "s3.local", Target("b", "k"), "/b/k"),
    ],
)
def test_a_request_names_a_bucket_and_a_key(
    raw: str, host: str, domain: str, target: Target, path: str | None
) -> None:
    got = Target.of(raw, host, domain)
    assert got == target
    assert got.object_path() == path


@pytest.mark.parametrize("name", ["a", "img_0001", "x-", "é", "\ue000", "ab\x01"])
def test_seeking_after_the_name_before_a_name_finds_that_name_first(name: str) -> None:
    """Every name from `name` on sorts after the seek point; a name between the two
    starts with the seek point itself (it is listed and filtered, never lost)."""
    before = _name_before(name)
    near = [
        name,
        name + "a",
        name[:-1],
        name[:-1] + chr(ord(name[-1]) - 1),
        name[:-1] + chr(ord(name[-1]) - 1) + "zz",
        "a",
        "\U0010ffff",
    ]
    for other in near:
        if any(0xD800 <= ord(c) <= 0xDFFF for c in other):
            continue  # not a name: no surrogates in a path
        if other >= name:
            assert other > before
        elif other > before:
            assert other.startswith(before)


def test_gateway_settings_come_from_the_environment() -> None:
    config = cfg.load(
        cfg.GatewayConfig,
        {
            "RESERVOIR_GATEWAY_LISTEN": "0.0.0.0:9000",
            "RESERVOIR_GATEWAY_READ_PIECE": "4MiB",
            "RESERVOIR_GATEWAY_CLOCK_SKEW": "5m",
            "RESERVOIR_GATEWAY_READ_THREADS": "0",
            "RESERVOIR_MASTER": "m:1",
        },
    )
    assert (
        config.listen,
        config.read_piece_bytes,
        config.clock_skew_s,
        config.read_threads,
    ) == ("0.0.0.0:9000", 4 << 20, 300.0, 0)
    assert config.client.master == "m:1"
    assert config.certificate == ("", "")
    with pytest.raises(InvalidArgument):
        cfg.load(cfg.GatewayConfig, {"RESERVOIR_GATEWAY_READ_AHEAD": "-1"})
    with pytest.raises(InvalidArgument):
        cfg.load(cfg.GatewayConfig, {"RESERVOIR_GATEWAY_READ_THREADS": "-1"})
