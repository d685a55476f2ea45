"""The gs:// and az:// (and abfs://) under-stores against real emulator processes:
fake-gcs-server and Azurite. Reads, listings, change tokens, credentials, bounded
failures, and writes: single puts, copies, deletes, and multipart uploads whose parts
another store object (as another process would) uploads."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.common.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from reservoir.common.understore.mounted_stores import open_under_store
from reservoir.common.understore.under_store import UnderStore, UnderStoreSettings

from .. import emulators
from ..emulators import AZURE_ACCOUNT, AZURE_ENV, AZURE_KEY, Azurite, FakeGcs, service_account_json

azurite = emulators.azurite
fake_gcs = emulators.fake_gcs


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


def test_get_range_is_byte_exact_clips_at_the_end_and_is_awaitable(cloud: UnderStore) -> None:
    data = os.urandom(5000)
    info = cloud.put("r.bin", data)
    assert cloud.get_range("r.bin", 0, 5000, info.etag) == data
    assert cloud.get_range("r.bin", 4990, 100) == data[4990:]
    assert cloud.get_range("r.bin", 100, 0) == b""

    async def reads() -> list[bytes]:
        return [
            bytes(await cloud.get_range_async("r.bin", 1000, 3000, info.etag)),
            bytes(await cloud.get_range_async("r.bin", 4990, 100)),
        ]

    assert asyncio.run(reads()) == [data[1000:4000], data[4990:]]


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


def test_a_missing_object_is_not_found(cloud: UnderStore) -> None:
    with pytest.raises(NotFound):
        cloud.head("nope")
    with pytest.raises(NotFound):
        cloud.get_range("nope", 0, 10)
    with pytest.raises(NotFound):
        asyncio.run(cloud.get_range_async("nope", 0, 10))


def test_list_shows_one_level_and_a_bound_stops_it_incomplete(cloud: UnderStore) -> None:
    for name in ("a", "b", "c"):
        cloud.put(f"d/{name}.txt", b"1")
    cloud.put("d/sub/z.txt", b"2")
    whole = cloud.list("d/")
    assert [o.key for o in whole.objects] == ["d/a.txt", "d/b.txt", "d/c.txt"]
    assert whole.prefixes == ["d/sub"] and whole.complete
    bounded = cloud.list("d/", limit=2)
    assert not bounded.complete
    assert 2 <= len(bounded.objects) + len(bounded.prefixes) < 4
    assert cloud.list("missing/").objects == []


def test_walk_lists_every_key_below_a_prefix_in_key_order(cloud: UnderStore) -> None:
    keys = ["d/b-x", "d/b/1.bin", "d/b/c/deep.bin", "d/b0", "d/z.bin", "e/out.bin"]
    for key in keys:
        cloud.put(key, key.encode())
    assert [o.key for page in cloud.walk("d/") for o in page] == keys[:5]
    assert [o.key for page in cloud.walk("") for o in page] == keys
    cloud.check()


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


def test_parts_uploaded_by_another_store_object_appear_whole_on_completion(
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


def test_an_upload_of_no_parts_is_an_empty_object(cloud: UnderStore) -> None:
    upload = cloud.create_upload("empty.bin")  # type: ignore[attr-defined]
    info = cloud.complete_upload("empty.bin", upload, [])  # type: ignore[attr-defined]
    assert info.size == 0 and cloud.head("empty.bin").size == 0


def test_an_aborted_upload_is_no_longer_open_and_leaves_no_object(cloud: UnderStore) -> None:
    upload = cloud.create_upload("gone.bin")  # type: ignore[attr-defined]
    other = cloud.create_upload("gone.bin")  # type: ignore[attr-defined]
    _twin(cloud).upload_part("gone.bin", upload, 1, b"part")  # type: ignore[attr-defined]
    assert sorted(cloud.open_uploads("gone.bin")) == sorted([upload, other])  # type: ignore[attr-defined]
    cloud.abort_upload("gone.bin", upload)  # type: ignore[attr-defined]
    cloud.abort_upload("gone.bin", upload)  # type: ignore[attr-defined]
    assert cloud.open_uploads("gone.bin") == [other]  # type: ignore[attr-defined]
    assert cloud.open_uploads("other.bin") == []  # type: ignore[attr-defined]
    with pytest.raises(NotFound):
        cloud.head("gone.bin")
    assert cloud.keys_below("") == []  # type: ignore[attr-defined]


def test_copy_with_if_match_copies_that_version_only(cloud: UnderStore) -> None:
    old = cloud.put("src.bin", b"first")
    new = cloud.put("src.bin", b"second")
    copied = cloud.copy("src.bin", "dst/copy.bin", if_match=new.etag)  # type: ignore[attr-defined]
    assert copied.size == 6 and cloud.get_range("dst/copy.bin", 0, 10) == b"second"
    with pytest.raises(Conflict):
        cloud.copy("src.bin", "dst/stale.bin", if_match=old.etag)  # type: ignore[attr-defined]
    with pytest.raises(NotFound):
        cloud.head("dst/stale.bin")
    with pytest.raises(NotFound):
        cloud.copy("missing.bin", "dst/x.bin")  # type: ignore[attr-defined]


def test_delete_removes_objects_and_ignores_missing_ones(cloud: UnderStore) -> None:
    for key in ("x/1.bin", "x/2.bin", "y.bin"):
        cloud.put(key, b"1")
    cloud.delete(["x/1.bin", "y.bin", "never.bin"])  # type: ignore[attr-defined]
    assert cloud.keys_below("") == ["x/2.bin"]  # type: ignore[attr-defined]
    assert cloud.keys_below("x/") == ["x/2.bin"]  # type: ignore[attr-defined]
