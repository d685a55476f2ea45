import pytest

from reservoir.common.errors import InvalidArgument
from reservoir.common.models import Inode, MountOptions, file_id_for


@pytest.mark.parametrize(
    ("policy", "ttl_ms"),
    [
        ("never", None),
        ("always", 0),
        ("interval:90s", 90_000),
        ("interval:5m", 300_000),
        ("", 1234),
    ],
)
def test_metadata_sync_policy_sets_how_long_metadata_is_trusted(
    policy: str, ttl_ms: int | None
) -> None:
    assert MountOptions(metadata_sync=policy).validated().sync_ttl_ms(1234) == ttl_ms


@pytest.mark.parametrize("bad", ["sometimes", "interval:", "interval:soon"])
def test_unknown_sync_policy_is_refused_at_mount(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        MountOptions(metadata_sync=bad).validated()


def test_a_changed_object_gets_a_new_file_id() -> None:
    a = file_id_for("s3://b/k", "etag1", 10, 4096)
    assert a == file_id_for("s3://b/k", "etag1", 10, 4096)
    assert a != file_id_for("s3://b/k", "etag2", 10, 4096)
    assert a != file_id_for("s3://b/k", "etag1", 11, 4096)
    assert a != file_id_for("s3://b/other", "etag1", 10, 4096)
    # The same object cut into other blocks: another block id space.
    assert a != file_id_for("s3://b/k", "etag1", 10, 8192)


def test_block_geometry_covers_the_file_exactly() -> None:
    inode = Inode(path="/m/f", is_dir=False, size=10_000, block_size=4096)
    assert inode.block_count == 3
    assert [inode.block_length(i) for i in range(3)] == [4096, 4096, 1808]
    assert Inode(path="/m/e", is_dir=False, size=0, block_size=4096).block_count == 0


def test_block_spans_split_a_range_into_each_blocks_share() -> None:
    inode = Inode(path="/m/f", is_dir=False, size=10_000, block_size=4096)
    assert list(inode.block_spans(0, 10_000)) == [(0, 0, 4096), (1, 0, 4096), (2, 0, 1808)]
    assert list(inode.block_spans(4000, 4200)) == [(0, 4000, 96), (1, 0, 104)]
    assert list(inode.block_spans(8192, 8193)) == [(2, 0, 1)]
    assert list(inode.block_spans(5000, 9000)) == [(1, 904, 3192), (2, 0, 808)]
    for offset, end in [(0, 1), (4095, 4097), (123, 10_000), (9_999, 10_000)]:
        spans = list(inode.block_spans(offset, end))
        assert sum(length for _, _, length in spans) == end - offset
