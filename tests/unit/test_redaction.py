"""At every log level, no signature, token or key id reaches a log line."""

from __future__ import annotations

import io
import logging
import os

import boto3
import pytest
from moto import mock_aws

from reservoir.common.redaction import redact
from reservoir.common.understore.s3_under_store import S3UnderStore
from reservoir.common.understore.under_store import UnderStoreSettings

KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SESSION = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN"


def test_known_secret_shapes_are_redacted() -> None:
    line = (
        "headers={'Authorization': b'AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/2026/us-east-1"
        "/s3/aws4_request, SignedHeaders=host, Signature=abcdef0123', "
        "'X-Amz-Security-Token': b'FwoGZXIvYXdz'} url=...&X-Amz-Signature=deadbeef&x=1 "
        "authorization: Bearer rsv_secret-token"
    )
    out = redact(line)
    for secret in ("AKIAIOSFODNN7EXAMPLE", "abcdef0123", "FwoGZXIvYXdz", "deadbeef", "rsv_secret"):
        assert secret not in out


@pytest.fixture
def debug_log() -> io.StringIO:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield stream
    root.removeHandler(handler)
    root.setLevel(old)


def test_debug_logs_of_real_s3_requests_carry_no_credentials(
    debug_log: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION)
    with mock_aws():
        store = S3UnderStore("s3://redact/p/", UnderStoreSettings(region="us-east-1"))
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="redact")
        store.put("k", os.urandom(100))
        assert store.head("k").size == 100  # (reads go through obstore, which mock_aws misses)
    text = debug_log.getvalue()
    assert "Authorization" in text or "authorization" in text.lower()  # botocore did log
    for secret in (KEY_ID, SECRET, SESSION):
        assert secret not in text
    assert "Signature=<redacted>" in text or "Signature=" not in text
