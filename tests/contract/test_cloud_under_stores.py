"""What is particular to the gs:// and az:// (and abfs://) under-stores, against real
emulator processes (fake-gcs-server, Azurite): one change token from HEAD and from
listings, the credential sources, bounded failures, many-part uploads. The whole
under-store contract runs on them too (`under_stores.py`: kinds "gs" and "az")."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import obstore
import pytest

from reservoir.common.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.understore.mounted_stores import open_under_store
from reservoir.common.understore.under_store import UnderStore, UnderStoreSettings

from ..emulators import AZURE_ACCOUNT, AZURE_ENV, AZURE_KEY, Azurite, FakeGcs, service_account_json


@pytest.fixture
def azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in AZURE_ENV.items():
        monkeypatch.setenv(name, value)


def _gcs(server: FakeGcs, credentials: str = "anonymous") -> UnderStore:
    bucket = server.create_bucket()
    return open_under_store(
        f"gs://{bucket}/root",
        UnderStoreSettings(endpoint_url=server.endpoint, credentials=credentials, timeout_s=5),
    )


def _az(server: Azurite, credentials: str = "env") -> UnderStore:
    container = server.create_container()
    return open_under_store(
        f"az://{container}/root",
        UnderStoreSettings(endpoint_url=server.endpoint, credentials=credentials, timeout_s=5),
    )


@pytest.fixture(params=["gs", "az"])
def cloud(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[UnderStore]:
    """A fresh bucket (container) of each cloud, its store rooted at `root/`."""
    if request.param == "gs":
        yield _gcs(request.getfixturevalue("fake_gcs"))
    else:
        for name, value in AZURE_ENV.items():
            monkeypatch.setenv(name, value)
        yield _az(request.getfixturevalue("azurite"))


def _twin(store: UnderStore) -> UnderStore:
    """Another store object on the same root, as another process opens it."""
    return open_under_store(store.uri, store.settings)  # type: ignore[attr-defined]


# ---- reads --------------------------------------------------------------------------------


def test_put_then_head_and_list_report_size_and_one_change_token(cloud: UnderStore) -> None:
    put = cloud.put("a/b.bin", b"x" * 1000)
    head = cloud.head("a/b.bin")
    listed = cloud.list("a/").objects
    walked = [o for page in cloud.walk("") for o in page]
    assert head.size == 1000 and head.etag and head.etag == put.etag
    assert [(o.key, o.size, o.etag) for o in listed] == [("a/b.bin", 1000, head.etag)]
    assert [(o.key, o.etag) for o in walked] == [("a/b.bin", head.etag)]
    assert listed[0].mtime_ms == head.mtime_ms


def test_a_rewrite_changes_the_token_and_a_read_with_the_old_one_is_a_conflict(
    cloud: UnderStore,
) -> None:
    old = cloud.put("v.bin", b"old")
    new = cloud.put("v.bin", b"newer content")
    assert new.etag != old.etag and cloud.head("v.bin").etag == new.etag
    assert cloud.list("").objects[0].etag == new.etag
    with pytest.raises(Conflict):
        cloud.get_range("v.bin", 0, 3, old.etag)
    with pytest.raises(Conflict):
        asyncio.run(cloud.get_range_async("v.bin", 0, 3, old.etag))
    assert cloud.get_range("v.bin", 0, 5, new.etag) == b"newer"


def test_a_read_is_received_straight_into_the_buffer_without_obstores_get(
    cloud: UnderStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # obstore receives a body into buffers of its own and hands out a copy; a worker's
    # cold block is received where it will live instead (direct_gets.py), signed as the
    # store asks, with its change token as the precondition.
    body = bytes(range(256)) * 64
    info = cloud.put("d/into.bin", body)

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a read went through obstore's GET")

    monkeypatch.setattr(obstore, "get_async", refused)
    monkeypatch.setattr(obstore, "get", refused)
    buffer = bytearray(len(body) + 10)
    got = asyncio.run(cloud.get_range_into("d/into.bin", 0, memoryview(buffer), info.etag))
    assert got == len(body) and bytes(buffer[:got]) == body
    assert cloud.get_range("d/into.bin", 100, 50, info.etag) == body[100:150]
    with pytest.raises(NotFound):
        asyncio.run(cloud.get_range_into("d/none.bin", 0, memoryview(bytearray(4))))


# ---- credentials --------------------------------------------------------------------------


def test_gcs_takes_a_service_account_from_the_env_or_a_file(
    fake_gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = service_account_json(tmp_path / "sa.json")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    from_env = _gcs(fake_gcs, "env")
    from_env.put("k.bin", b"signed")
    assert from_env.get_range("k.bin", 0, 6) == b"signed"
    from_file = _gcs(fake_gcs, f"file:{key_file}")
    assert from_file.put("f.bin", b"f").size == 1
    from reservoir.common.understore.gcs_under_store import GoogleToken

    token = GoogleToken(f"file:{key_file}").token()
    assert token.count(".") == 2  # a signed JWT


def test_gcs_env_credentials_without_the_variable_are_refused_by_name(
    fake_gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    with pytest.raises(PermissionDenied, match="GOOGLE_APPLICATION_CREDENTIALS"):
        _gcs(fake_gcs, "env")
    (tmp_path / "user.json").write_text('{"type": "authorized_user", "refresh_token": "s3cr3t"}')
    with pytest.raises(InvalidArgument, match="not a service-account key") as refused:
        _gcs(fake_gcs, f"file:{tmp_path / 'user.json'}")
    assert "s3cr3t" not in str(refused.value)


def test_azure_takes_the_account_key_from_a_file_and_anonymous_signs_nothing(
    azurite: Azurite, tmp_path: Path, azure_env: None
) -> None:
    key_file = tmp_path / "azure"
    key_file.write_text(f"# a Secret\naccount_name={AZURE_ACCOUNT}\naccount_key={AZURE_KEY}\n")
    from_file = _az(azurite, f"file:{key_file}")
    assert from_file.put("f.bin", b"file").size == 4
    anonymous = open_under_store(
        from_file.uri,
        UnderStoreSettings(endpoint_url=azurite.endpoint, credentials="anonymous", retries=1),
    )
    # A private container: an unsigned request is refused.
    with pytest.raises((PermissionDenied, NotFound)):
        anonymous.head("f.bin")


def test_a_wrong_azure_key_is_permission_denied_without_the_key_in_the_message(
    azurite: Azurite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXk="
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", AZURE_ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", wrong)
    store = _az_with_key(azurite)
    with pytest.raises(PermissionDenied) as refused:
        store.put("x.bin", b"x")
    assert wrong not in str(refused.value) and "'env'" in str(refused.value)
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_KEY")
    with pytest.raises(PermissionDenied, match="AZURE_STORAGE_ACCOUNT_KEY"):
        _az_with_key(azurite)


def _az_with_key(azurite: Azurite) -> UnderStore:
    # The container is made with the real key; the store under test uses the env's.
    container = azurite.create_container()
    return open_under_store(
        f"az://{container}/",
        UnderStoreSettings(endpoint_url=azurite.endpoint, credentials="env", retries=1),
    )


def test_an_abfs_uri_names_the_same_blobs_as_az(azurite: Azurite, azure_env: None) -> None:
    store = _az(azurite)
    store.put("same.bin", b"one blob")
    container = store.uri.split("/")[2]
    abfs = open_under_store(
        f"abfs://{container}@{AZURE_ACCOUNT}.dfs.core.windows.net/root/",
        UnderStoreSettings(endpoint_url=azurite.endpoint, credentials="env"),
    )
    assert abfs.get_range("same.bin", 0, 100) == b"one blob"


@pytest.mark.parametrize("scheme", ["gs", "az"])
def test_an_unreachable_endpoint_is_unavailable_after_bounded_attempts(
    scheme: str, azure_env: None
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        endpoint = f"http://127.0.0.1:{port}" + (f"/{AZURE_ACCOUNT}" if scheme == "az" else "")
        store = open_under_store(
            f"{scheme}://bucket1/p/",
            UnderStoreSettings(
                endpoint_url=endpoint, credentials="anonymous", timeout_s=2, retries=2
            ),
        )
        with pytest.raises(Unavailable, match=f"127.0.0.1:{port}"):
            store.head("a.bin")
        with pytest.raises(Unavailable):
            store.get_range("a.bin", 0, 10)
        with pytest.raises(Unavailable):
            store.list("")


# ---- writes -------------------------------------------------------------------------------


def test_more_parts_than_one_compose_call_takes_are_published_whole_and_leave_nothing_hidden(
    cloud: UnderStore,
) -> None:
    cloud.put("big.bin", b"the old object")
    upload = cloud.create_upload("big.bin")  # type: ignore[attr-defined]
    worker = _twin(cloud)
    # 40 parts: more than one GCS compose call takes.
    chunks = [os.urandom(1000 + n) for n in range(40)]
    parts = [
        worker.upload_part("big.bin", upload, n + 1, chunk)  # type: ignore[attr-defined]
        for n, chunk in enumerate(chunks)
    ]
    assert cloud.get_range("big.bin", 0, 100) == b"the old object"
    assert cloud.open_uploads("big.bin") == [upload]  # type: ignore[attr-defined]
    assert [o.key for page in cloud.walk("") for o in page] == ["big.bin"]
    assert cloud.list("").prefixes == []
    assert cloud.keys_below("") == ["big.bin"]  # type: ignore[attr-defined]
    info = cloud.complete_upload("big.bin", upload, parts)  # type: ignore[attr-defined]
    whole = b"".join(chunks)
    assert info.size == len(whole) and cloud.head("big.bin").etag == info.etag
    assert cloud.get_range("big.bin", 0, len(whole) + 10, info.etag) == whole
    assert cloud.open_uploads("big.bin") == []  # type: ignore[attr-defined]
    assert cloud.keys_below("") == ["big.bin"]  # type: ignore[attr-defined]


def test_an_objects_metadata_is_kept_by_a_put_and_by_a_completed_upload(
    cloud: UnderStore,
) -> None:
    import obstore

    metadata = ObjectMetadata.of({"run": "7"}, content_type="text/plain", cache_control="no-cache")
    cloud.put("whole.txt", b"one request", metadata)
    upload = cloud.create_upload("parts.txt", metadata)
    part = _twin(cloud).upload_part("parts.txt", upload, 1, b"in parts")
    cloud.complete_upload("parts.txt", upload, [part], metadata)
    for key in ("whole.txt", "parts.txt"):
        attributes = obstore.get(cloud.store, key).attributes  # type: ignore[attr-defined]
        assert attributes.get("Content-Type") == "text/plain", (key, attributes)
        assert attributes.get("Cache-Control") == "no-cache", (key, attributes)
        assert attributes.get("run") == "7", (key, attributes)
