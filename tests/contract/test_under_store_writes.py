"""The write half of the one under-store contract, for every store that writes: whole
objects, multipart uploads whose parts another process sends, copies, renames, deletes.
A new writable backend adds its kind to `under_stores.WRITABLE` and passes all of it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from reservoir.common.errors import Conflict, InvalidArgument, NotFound, Unavailable
from reservoir.common.understore.store_schemes import scheme_of
from reservoir.common.understore.under_store import Part, UnderStore

from .under_stores import WRITABLE, opened_with_opener

Reopen = Callable[[], UnderStore]


@pytest.fixture(params=WRITABLE)
def writable(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[UnderStore, Reopen]:
    """A store that writes, and how another process opens the same store."""
    store, _, reopen = opened_with_opener(request, tmp_path)
    return store, reopen


def _parts(store: UnderStore, count: int) -> list[bytes]:
    """`count` parts of the store's least size each (the last one shorter)."""
    size = max(1, store.limits().min_part_size)
    return [os.urandom(size) for _ in range(count - 1)] + [os.urandom(max(1, size // 3))]


def test_a_writable_store_says_so_in_its_limits_and_its_scheme(
    writable: tuple[UnderStore, Reopen],
) -> None:
    store, _ = writable
    limits = store.limits()
    assert limits.writes and scheme_of(store.uri).writes
    assert 1 <= limits.min_part_size <= limits.max_part_size and limits.max_parts >= 10_000


def test_a_put_replaces_the_object_whole_with_a_new_change_token(
    writable: tuple[UnderStore, Reopen],
) -> None:
    store, _ = writable
    first = store.put("d/x.bin", b"first")
    second = store.put("d/x.bin", b"second, longer")
    assert second.etag != first.etag and second.size == 14
    assert store.head("d/x.bin").etag == second.etag
    assert store.get_range("d/x.bin", 0, 100) == b"second, longer"


def test_parts_sent_by_another_process_appear_only_once_the_upload_completes(
    writable: tuple[UnderStore, Reopen],
) -> None:
    store, reopen = writable
    store.put("ckpt/model.pt", b"the old checkpoint")
    upload = store.create_upload("ckpt/model.pt")
    worker = reopen()  # a worker's own store object: the upload's state is in the store
    datas = _parts(store, 3)
    parts = [worker.upload_part("ckpt/model.pt", upload, n + 1, d) for n, d in enumerate(datas)]
    assert store.get_range("ckpt/model.pt", 0, 100) == b"the old checkpoint"
    assert upload in store.open_uploads("ckpt/model.pt")
    info = store.complete_upload("ckpt/model.pt", upload, parts)
    whole = b"".join(datas)
    assert info.size == len(whole) and store.head("ckpt/model.pt").etag == info.etag
    assert store.get_range("ckpt/model.pt", 0, len(whole)) == whole
    assert upload not in store.open_uploads("ckpt/model.pt")


def test_a_part_sent_again_replaces_the_first_one(writable: tuple[UnderStore, Reopen]) -> None:
    store, reopen = writable
    upload = store.create_upload("again.bin")
    reopen().upload_part("again.bin", upload, 1, b"lost in flight")
    part = reopen().upload_part("again.bin", upload, 1, b"sent again")
    assert store.complete_upload("again.bin", upload, [part]).size == 10
    assert store.get_range("again.bin", 0, 100) == b"sent again"


def test_an_upload_of_no_parts_completes_as_an_empty_object(
    writable: tuple[UnderStore, Reopen],
) -> None:
    store, _ = writable
    upload = store.create_upload("empty.bin")
    info = store.complete_upload("empty.bin", upload, [])
    assert info.size == 0 and store.head("empty.bin").size == 0


def test_an_aborted_upload_is_gone_and_aborting_it_again_is_no_error(
    writable: tuple[UnderStore, Reopen],
) -> None:
    store, reopen = writable
    upload = store.create_upload("gone.bin")
    reopen().upload_part("gone.bin", upload, 1, b"bytes")
    store.abort_upload("gone.bin", upload)
    store.abort_upload("gone.bin", upload)
    assert upload not in store.open_uploads("gone.bin")
    with pytest.raises(NotFound):
        store.head("gone.bin")
    # A late part is refused: NoSuchUpload from S3 (the local S3 server answers 500).
    with pytest.raises((NotFound, Unavailable)):
        store.upload_part("gone.bin", upload, 2, b"late")


def test_open_uploads_name_only_the_uploads_of_that_key(
    writable: tuple[UnderStore, Reopen],
) -> None:
    store, _ = writable
    mine = store.create_upload("u/a.bin")
    other = store.create_upload("u/b.bin")
    assert mine in store.open_uploads("u/a.bin") and other not in store.open_uploads("u/a.bin")
    store.abort_upload("u/a.bin", mine)
    store.abort_upload("u/b.bin", other)


def test_uploads_in_progress_are_in_no_listing(writable: tuple[UnderStore, Reopen]) -> None:
    store, reopen = writable
    store.put("seen.bin", b"s")
    upload = store.create_upload("hidden/big.bin")
    reopen().upload_part("hidden/big.bin", upload, 1, b"part")
    assert store.keys_below("") == ["seen.bin"]
    listing = store.list("")
    assert [o.key for o in listing.objects] == ["seen.bin"] and listing.prefixes == []
    assert [o.key for page in store.walk("") for o in page] == ["seen.bin"]
    store.abort_upload("hidden/big.bin", upload)


def test_a_copy_checks_the_sources_change_token(writable: tuple[UnderStore, Reopen]) -> None:
    store, _ = writable
    source = store.put("src.bin", b"source bytes")
    copied = store.copy("src.bin", "dir/dst.bin", source.etag)
    assert copied.size == 12 and store.get_range("dir/dst.bin", 0, 100) == b"source bytes"
    store.put("src.bin", b"changed since")
    with pytest.raises(Conflict):
        store.copy("src.bin", "dir/other.bin", source.etag)
    with pytest.raises(NotFound):
        store.copy("missing.bin", "dir/x.bin")


def test_a_rename_moves_in_place_when_the_store_can(writable: tuple[UnderStore, Reopen]) -> None:
    store, _ = writable
    before = store.put("a/old.bin", b"moved bytes")
    if not store.limits().renames:
        with pytest.raises(InvalidArgument, match="rename"):
            store.rename("a/old.bin", "b/new.bin")
        return
    store.put("b/new.bin", b"replaced")
    after = store.rename("a/old.bin", "b/new.bin")
    assert after.size == before.size and store.get_range("b/new.bin", 0, 100) == b"moved bytes"
    with pytest.raises(NotFound):
        store.head("a/old.bin")
    with pytest.raises(NotFound):
        store.rename("a/old.bin", "c/x.bin")


def test_delete_removes_objects_and_a_missing_one_is_no_error(
    writable: tuple[UnderStore, Reopen],
) -> None:
    store, _ = writable
    for key in ("t/a.bin", "t/deep/b.bin", "t/deep/er/c.bin", "u.bin"):
        store.put(key, b"x")
    assert store.keys_below("t/") == ["t/a.bin", "t/deep/b.bin", "t/deep/er/c.bin"]
    store.delete(["t/a.bin", "t/deep/b.bin", "t/deep/er/c.bin", "never.bin"])
    assert store.keys_below("") == ["u.bin"]
    assert store.list("").prefixes == []  # no directory outlives its last object


def test_a_directory_marker_shows_an_empty_directory_until_deleted(
    writable: tuple[UnderStore, Reopen],
) -> None:
    store, _ = writable
    store.put("empty/", b"")
    assert store.list("").prefixes == ["empty"]
    store.delete(["empty/"])
    assert store.list("").prefixes == []


def test_a_write_with_a_bad_key_is_refused_before_anything_is_written(
    writable: tuple[UnderStore, Reopen],
) -> None:
    store, _ = writable
    if urlsplit(store.uri).scheme != "file":
        pytest.skip("only a file system has keys that escape the root")
    with pytest.raises(InvalidArgument):
        store.put("../escape.bin", b"x")
    with pytest.raises(InvalidArgument):
        store.create_upload("a/../../escape.bin")


def test_a_completion_naming_a_part_not_uploaded_fails_and_publishes_nothing(
    writable: tuple[UnderStore, Reopen],
) -> None:
    store, reopen = writable
    upload = store.create_upload("bad.bin")
    part = reopen().upload_part("bad.bin", upload, 1, b"one")
    with pytest.raises((InvalidArgument, NotFound, Conflict)):
        store.complete_upload("bad.bin", upload, [part, Part(2, part.etag)])
    with pytest.raises(NotFound):
        store.head("bad.bin")
    store.abort_upload("bad.bin", upload)
