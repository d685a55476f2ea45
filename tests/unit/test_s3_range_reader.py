"""S3UnderStore's awaited ranged GETs (obstore) fail as clearly as its boto3 calls: the
endpoint or the credential source named, mapped through the same error table."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from reservoir.common.errors import PermissionDenied, Unavailable
from reservoir.common.understore.s3_under_store import S3UnderStore
from reservoir.common.understore.under_store import UnderStoreSettings


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_names_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    settings = UnderStoreSettings(endpoint_url=endpoint, timeout_s=2, retries=1)
    store = S3UnderStore("s3://bucket/root/", settings)
    with pytest.raises(Unavailable, match=f"cannot connect to the under-store endpoint {endpoint}"):
        asyncio.run(store.get_range_async("k", 0, 10))


def test_missing_credentials_name_the_credential_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    settings = UnderStoreSettings(endpoint_url="http://s3.test:9000", timeout_s=2)
    store = S3UnderStore("s3://bucket/root/", settings)
    with pytest.raises(PermissionDenied, match=r"s3\.test:9000 \(credential source 'env'"):
        asyncio.run(store.get_range_async("k", 0, 10))
