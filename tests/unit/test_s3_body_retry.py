"""S3UnderStore.get_range re-reads a body that breaks off, within a bound, on an in-process
fake of the boto3 client (no sockets)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import (
    EndpointConnectionError,
    IncompleteReadError,
    NoCredentialsError,
    ResponseStreamingError,
)

from reservoir.common.errors import PermissionDenied, Unavailable
from reservoir.common.understore.s3_under_store import S3UnderStore
from reservoir.common.understore.under_store import BodyRetry, UnderStoreSettings

DATA = bytes(range(256)) * 40  # 10240 bytes


class _Body:
    def __init__(self, data: bytes, failure: BaseException | None) -> None:
        self._data = data
        self._failure = failure
        self.closed = False

    def read(self) -> bytes:
        if self._failure is not None:
            raise self._failure
        return self._data

    def close(self) -> None:
        self.closed = True


class _BreakingS3:
    """Answers ranged GETs of DATA; the first `faults` bodies break off as `fault` says."""

    def __init__(self, faults: int, fault: str) -> None:
        self.faults = faults
        self.fault = fault
        self.gets = 0
        self.bodies: list[_Body] = []

    def get_object(self, **args: Any) -> dict[str, Any]:
        self.gets += 1
        first, last = (int(x) for x in args["Range"][len("bytes=") :].split("-"))
        last = min(last, len(DATA) - 1)
        data = DATA[first : last + 1]
        failure: BaseException | None = None
        if self.gets <= self.faults:
            if self.fault == "short":
                data = data[: len(data) // 2]  # the headers promise more than arrives
            elif self.fault == "incomplete":
                failure = IncompleteReadError(actual_bytes=10, expected_bytes=len(data))
            elif self.fault == "streaming":
                failure = ResponseStreamingError(error="Connection broken: IncompleteRead")
            elif self.fault == "reset":
                failure = ConnectionResetError(104, "Connection reset by peer")
        body = _Body(data, failure)
        self.bodies.append(body)
        return {
            "Body": body,
            "ContentLength": last - first + 1,
            "ContentRange": f"bytes {first}-{last}/{len(DATA)}",
        }


def _store(s3: object, attempts: int = 3) -> S3UnderStore:
    retry = BodyRetry(attempts=attempts, backoff_s=0.001, max_backoff_s=0.002)
    settings = UnderStoreSettings(endpoint_url="http://s3.test:9000", body_retry=retry)
    return S3UnderStore("s3://bucket/root/", settings, client=s3)


@pytest.mark.parametrize("fault", ["short", "incomplete", "streaming", "reset"])
def test_a_body_that_breaks_off_is_read_again_and_the_bytes_are_exact(fault: str) -> None:
    s3 = _BreakingS3(faults=3, fault=fault)
    assert _store(s3, attempts=3).get_range("k", 1000, 4096) == DATA[1000:5096]
    assert s3.gets == 4
    assert all(body.closed for body in s3.bodies)


def test_a_body_that_keeps_breaking_off_fails_after_the_bound_naming_the_endpoint() -> None:
    s3 = _BreakingS3(faults=100, fault="reset")
    with pytest.raises(Unavailable, match=r"s3\.test:9000 broke off 3 times"):
        _store(s3, attempts=2).get_range("k", 0, 100)
    assert s3.gets == 3


def test_a_range_clipped_at_the_end_of_the_object_is_not_a_short_read() -> None:
    s3 = _BreakingS3(faults=0, fault="")
    assert _store(s3).get_range("k", len(DATA) - 10, 4096) == DATA[-10:]
    assert s3.gets == 1


def test_backoff_grows_and_stays_under_its_cap() -> None:
    retry = BodyRetry(attempts=5, backoff_s=0.1, max_backoff_s=0.3)
    delays = [retry.delay_s(n) for n in range(5)]
    assert 0.05 <= delays[0] <= 0.1
    assert all(d <= 0.3 for d in delays)
    assert delays[4] >= 0.15


class _Refusing:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def get_object(self, **args: Any) -> dict[str, Any]:
        raise self.error

    def head_object(self, **args: Any) -> dict[str, Any]:
        raise self.error


def test_a_refused_connection_names_the_endpoint_not_credentials() -> None:
    store = _store(_Refusing(EndpointConnectionError(endpoint_url="http://s3.test:9000/bucket")))
    with pytest.raises(
        Unavailable, match=r"cannot connect to the under-store endpoint http://s3\.test:9000"
    ):
        store.get_range("k", 0, 10)


def test_missing_credentials_name_the_credential_source() -> None:
    store = _store(_Refusing(NoCredentialsError()))
    with pytest.raises(
        PermissionDenied,
        match=r"credential source 'env'.*s3\.test:9000|s3\.test:9000.*credential source 'env'",
    ):
        store.head("k")


class _IgnoresRanges:
    def get_object(self, **args: Any) -> dict[str, Any]:
        return {"Body": _Body(DATA, None), "ContentLength": len(DATA)}


def test_a_store_that_ignores_the_range_still_yields_just_the_range() -> None:
    assert _store(_IgnoresRanges()).get_range("k", 100, 50) == DATA[100:150]
