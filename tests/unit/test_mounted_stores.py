"""MountedStores opens one under-store per mount and reopens it when the mount changes."""

from __future__ import annotations

from reservoir.common.models import Mount, MountOptions
from reservoir.common.mounted_stores import MountedStores
from reservoir.common.s3_under_store import S3UnderStore


def _mount(**options: object) -> Mount:
    return Mount("/m", "s3://bucket/data/", MountOptions(**options), 1)  # type: ignore[arg-type]


def test_the_same_mount_reuses_its_store() -> None:
    stores = MountedStores(timeout_s=1)
    assert stores.for_mount(_mount()) is stores.for_mount(_mount())


def test_a_remount_with_a_new_endpoint_credentials_or_block_size_reopens_the_store() -> None:
    stores = MountedStores(timeout_s=1)
    first = stores.for_mount(_mount(endpoint_url="http://a:9000"))
    moved = stores.for_mount(_mount(endpoint_url="http://b:9000"))
    assert moved is not first
    assert isinstance(moved, S3UnderStore) and moved.endpoint == "http://b:9000"
    assert stores.for_mount(_mount(endpoint_url="http://b:9000", credentials="anonymous")) is not (
        moved
    )
    resized = stores.for_mount(_mount(endpoint_url="http://b:9000", block_size=8192))
    assert resized is not moved
