"""One contract for every UnderStore backend: file:// on a temp dir, s3:// against the
local S3-compatible server process."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from reservoir.common.errors import Conflict, NotFound
from reservoir.common.understore.mounted_stores import open_under_store
from reservoir.common.understore.under_store import UnderStore, UnderStoreSettings
from reservoir.common.understore.under_store_metrics import MeasuredUnderStore, UnderStoreMetrics
from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster = LocalCluster(state_dir=tmp_path_factory.mktemp("s3"))
    cluster.start_s3()
    try:
        yield cluster.s3_endpoint
    finally:
        cluster.down()


@pytest.fixture(params=["file", "s3", "file-measured", "s3-measured"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> UnderStore:
    """Each backend as it is opened, and as a server opens it: every request timed (the
    timing must change no answer and no error)."""
    kind, _, measured = request.param.partition("-")
    metrics = UnderStoreMetrics(CollectorRegistry(), "contract_") if measured else None
    if kind == "file":
        root = tmp_path / "ufs"
        root.mkdir()
        return open_under_store(f"file://{root}/", UnderStoreSettings(), metrics)
    endpoint = request.getfixturevalue("s3_endpoint")
    os.environ.update(DEV_CREDENTIALS)
    bucket = f"c-{uuid.uuid4().hex[:10]}"
    settings = UnderStoreSettings(endpoint_url=endpoint, credentials="env", timeout_s=5)
    ufs = open_under_store(f"s3://{bucket}/root", settings, metrics)
    s3 = ufs.inner if isinstance(ufs, MeasuredUnderStore) else ufs
    s3._s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    return ufs


def test_put_then_head_reports_size_and_a_stable_etag(store: UnderStore) -> None:
    info = store.put("a/b.bin", b"x" * 1000)
    head = store.head("a/b.bin")
    assert head.size == 1000 and head.etag == info.etag and head.etag


def test_head_of_a_missing_key_is_not_found(store: UnderStore) -> None:
    with pytest.raises(NotFound):
        store.head("nope")


def test_get_range_returns_exact_bytes_and_clips_at_the_end(store: UnderStore) -> None:
    data = os.urandom(5000)
    info = store.put("r.bin", data)
    assert store.get_range("r.bin", 0, 5000, info.etag) == data
    assert store.get_range("r.bin", 4990, 10) == data[4990:]
    assert store.get_range("r.bin", 100, 0) == b""


def test_get_range_with_a_stale_etag_is_a_conflict(store: UnderStore) -> None:
    old = store.put("v.bin", b"old")
    store.put("v.bin", b"newer content")
    with pytest.raises(Conflict):
        store.get_range("v.bin", 0, 3, old.etag)


def test_an_awaited_get_range_returns_exact_bytes_and_clips_at_the_end(store: UnderStore) -> None:
    data = os.urandom(5000)
    info = store.put("r.bin", data)

    async def reads() -> list[bytes]:
        return [
            await store.get_range_async("r.bin", 0, 5000, info.etag),
            await store.get_range_async("r.bin", 4990, 10),
            await store.get_range_async("r.bin", 1000, 3000, info.etag),
            await store.get_range_async("r.bin", 100, 0),
        ]

    assert asyncio.run(reads()) == [data, data[4990:], data[1000:4000], b""]


def test_an_awaited_get_range_with_a_stale_etag_is_a_conflict(store: UnderStore) -> None:
    old = store.put("v.bin", b"old")
    store.put("v.bin", b"newer content")
    with pytest.raises(Conflict):
        asyncio.run(store.get_range_async("v.bin", 0, 3, old.etag))


def test_an_awaited_get_range_of_a_missing_key_is_not_found(store: UnderStore) -> None:
    with pytest.raises(NotFound):
        asyncio.run(store.get_range_async("nope", 0, 10))


def test_list_shows_one_level_of_objects_and_prefixes(store: UnderStore) -> None:
    store.put("d/x.txt", b"1")
    store.put("d/y.txt", b"22")
    store.put("d/sub/z.txt", b"333")
    listing = store.list("d/")
    assert sorted(o.key for o in listing.objects) == ["d/x.txt", "d/y.txt"]
    assert listing.prefixes == ["d/sub"]
    assert store.list("missing/").objects == []


def test_a_bounded_list_stops_at_the_bound_and_says_it_is_incomplete(store: UnderStore) -> None:
    for name in ("a", "b", "c"):
        store.put(f"d/{name}.txt", b"1")
    store.put("d/sub/z.txt", b"2")
    bounded = store.list("d/", limit=2)
    assert not bounded.complete
    assert 2 <= len(bounded.objects) + len(bounded.prefixes) < 4
    whole = store.list("d/", limit=4)
    assert whole.complete and len(whole.objects) == 3 and whole.prefixes == ["d/sub"]
    assert store.list("d/").complete


def test_walk_lists_every_key_below_a_prefix_at_any_depth_in_key_order(
    store: UnderStore,
) -> None:
    # "d/b-x" sorts before the keys below "d/b/", "d/b0" after them.
    keys = ["d/b-x", "d/b/1.bin", "d/b/c/deep.bin", "d/b0", "d/z.bin", "e/out.bin"]
    for key in keys:
        store.put(key, key.encode())
    walked = [(o.key, o.size) for page in store.walk("d/") for o in page]
    below = [k for k in keys if k.startswith("d/")]
    assert walked == [(k, len(k)) for k in below]
    assert [o.key for page in store.walk("") for o in page] == keys


def test_uri_and_key_are_inverse(store: UnderStore) -> None:
    assert store.key_of(store.uri_of("a/b")) == "a/b"


def test_check_passes_for_a_readable_store(store: UnderStore) -> None:
    store.check()
