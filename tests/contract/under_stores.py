"""How the contract suites open each backend: the kinds of store, and for each a fresh
store (a new bucket, directory, URL prefix or HDFS directory) and how a test puts an object there. A kind
`X-measured` is X as a server opens it, every request timed (the timing must change no
answer and no error)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from reservoir.common.understore.mounted_stores import open_under_store
from reservoir.common.understore.under_store import ObjectInfo, UnderStore, UnderStoreSettings
from reservoir.common.understore.under_store_metrics import MeasuredUnderStore, UnderStoreMetrics
from reservoir.local.cluster import DEV_CREDENTIALS

from ..emulators import AZURE_ENV, Azurite, FakeGcs
from ..http_files import HttpFiles
from ..webhdfs_server import WebHdfsServer

Put = Callable[[str, bytes], ObjectInfo]

# Every store; those that list; those that write. A new backend adds its kind here.
READABLE = [
    "file", "s3", "http", "webhdfs", "gs", "az",
    "file-measured", "s3-measured", "http-measured", "webhdfs-measured",
]  # fmt: skip
LISTABLE = [
    "file", "s3", "webhdfs", "gs", "az",
    "file-measured", "s3-measured", "webhdfs-measured", "az-measured",
]  # fmt: skip
WRITABLE = [
    "file", "s3", "webhdfs", "gs", "az",
    "file-measured", "s3-measured", "webhdfs-measured", "gs-measured",
]  # fmt: skip


def opened(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[UnderStore, Put]:
    """The store of the kind `request.param` names, and how a test puts an object there."""
    store, put, _ = opened_with_opener(request, tmp_path)
    return store, put


def opened_with_opener(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[UnderStore, Put, Callable[[], UnderStore]]:
    """Also a way to open the same store again, as another process would."""
    kind, _, measured = request.param.partition("-")
    metrics = UnderStoreMetrics(CollectorRegistry(), "contract_") if measured else None

    def again(uri: str, settings: UnderStoreSettings) -> Callable[[], UnderStore]:
        return lambda: open_under_store(uri, settings, metrics)

    if kind == "file":
        root = tmp_path / "ufs"
        root.mkdir()
        uri, settings = f"file://{root}/", UnderStoreSettings()
        ufs = open_under_store(uri, settings, metrics)
        return ufs, ufs.put, again(uri, settings)
    if kind == "http":
        server: HttpFiles = request.getfixturevalue("http_files")
        prefix = uuid.uuid4().hex[:10]
        settings = UnderStoreSettings(credentials="anonymous", timeout_s=5)
        uri = f"{server.url}{prefix}/"
        ufs = open_under_store(uri, settings, metrics)

        def served(key: str, data: bytes) -> ObjectInfo:
            path = server.directory / prefix / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            return ufs.head(key)

        return ufs, served, again(uri, settings)
    if kind == "gs":
        gcs: FakeGcs = request.getfixturevalue("fake_gcs")
        settings = UnderStoreSettings(
            endpoint_url=gcs.endpoint, credentials="anonymous", timeout_s=5
        )
        uri = f"gs://{gcs.create_bucket()}/root"
        ufs = open_under_store(uri, settings, metrics)
        return ufs, ufs.put, again(uri, settings)
    if kind == "az":
        azurite: Azurite = request.getfixturevalue("azurite")
        os.environ.update(AZURE_ENV)
        settings = UnderStoreSettings(endpoint_url=azurite.endpoint, credentials="env", timeout_s=5)
        uri = f"az://{azurite.create_container()}/root"
        ufs = open_under_store(uri, settings, metrics)
        return ufs, ufs.put, again(uri, settings)
    if kind == "webhdfs":
        hdfs: WebHdfsServer = request.getfixturevalue("webhdfs_server")
        directory = uuid.uuid4().hex[:10]
        (hdfs.root / directory).mkdir()
        uri = hdfs.uri(f"{directory}/")
        settings = UnderStoreSettings(credentials="anonymous", timeout_s=5)
        ufs = open_under_store(uri, settings, metrics)
        return ufs, ufs.put, again(uri, settings)
    assert kind == "s3", kind
    endpoint = request.getfixturevalue("s3_endpoint")
    os.environ.update(DEV_CREDENTIALS)
    bucket = f"c-{uuid.uuid4().hex[:10]}"
    settings = UnderStoreSettings(endpoint_url=endpoint, credentials="env", timeout_s=5)
    uri = f"s3://{bucket}/root"
    ufs = open_under_store(uri, settings, metrics)
    s3 = ufs.inner if isinstance(ufs, MeasuredUnderStore) else ufs
    s3._s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    return ufs, ufs.put, again(uri, settings)
