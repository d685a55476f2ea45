"""What a worker accepts as a block request, before it looks anything up or fetches."""

from __future__ import annotations

import pytest

from reservoir.common.errors import InvalidArgument
from reservoir.common.models import file_id_for
from reservoir.worker.service import BlockRequest


def _request(uri: str, size: int = 10, block_size: int = 4096) -> BlockRequest:
    return BlockRequest(
        file_id=file_id_for(uri, "e", size, block_size),
        index=0,
        offset=0,
        length=-1,
        ufs_uri=uri,
        etag="e",
        file_size=size,
        block_size=block_size,
        mount_path="/m",
    )


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket/mount/../../etc/passwd",
        "s3://bucket/mount/../other/key",
        "s3://bucket/mount/./key",
        "s3://bucket/mount//key",
        "s3://bucket/mount/",
        "s3://bucket/mount/key\x00",
        "file:///data/mount/../../etc/shadow",
        "not-a-uri",
    ],
)
def test_an_object_uri_that_leaves_its_path_is_refused(uri: str) -> None:
    with pytest.raises(InvalidArgument, match="ufs_uri"):
        _request(uri).validated()


@pytest.mark.parametrize(
    "uri", ["s3://bucket/mount/train/0001.jpg", "file:///data/mount/a.b/..c/x", "s3://b/k"]
)
def test_an_object_uri_as_the_master_writes_it_is_accepted(uri: str) -> None:
    assert _request(uri).validated().ufs_uri == uri
