"""The binary chunk form of inodes: lossless, and small enough for etcd's budget."""

from __future__ import annotations

import pytest

from reservoir.common.errors import InvalidArgument
from reservoir.common.metadata.inode_codec import (
    ChunkPlace,
    decode_chunk,
    encode_chunk,
    entry,
    file_facts,
    find_in_chunk,
    iter_chunk,
)
from reservoir.common.models import Inode, file_id_for
from reservoir.common.object_metadata import ObjectMetadata

PLACE = ChunkPlace("/data/train/shard-00042", "/data", "s3://bucket/imagenet/")
SYNCED = 1_764_600_000_123


def _file(name: str, etag: str = "0123456789abcdef0123456789abcdef", **kw: object) -> Inode:
    path = f"{PLACE.directory}/{name}"
    uri = "s3://bucket/imagenet/" + path[len("/data/") :]
    size = int(kw.pop("size", 112_345))  # type: ignore[call-overload]
    block = int(kw.pop("block_size", 4 * 1024 * 1024))  # type: ignore[call-overload]
    fields: dict[str, object] = {
        "path": path,
        "is_dir": False,
        "size": size,
        "mtime_ms": 1_764_500_000_000,
        "etag": etag,
        "block_size": block,
        "file_id": file_id_for(uri, etag, size, block),
        "ufs_uri": uri,
        "mount_path": "/data",
        "synced_ms": SYNCED,
    }
    fields.update(kw)
    return Inode(**fields)  # type: ignore[arg-type]


def _round_trip(inodes: list[Inode]) -> list[Inode]:
    raw = encode_chunk([entry(i, PLACE) for i in inodes], PLACE)
    return decode_chunk(raw, PLACE)


def test_typical_files_round_trip_exactly() -> None:
    inodes = [_file(f"img-{i:06d}.jpg", etag=f"{i:032x}") for i in range(100, 110)]
    assert _round_trip(inodes) == inodes


def test_unusual_fields_round_trip_exactly() -> None:
    inodes = [
        _file("a-multipart.bin", etag="0123456789abcdef0123456789abcdef-17"),
        _file("b-odd-etag.bin", etag="W/not-an-md5"),
        _file("c-no-etag.bin", etag=""),
        _file("d-ms-mtime.bin", mtime_ms=1_764_500_000_123),
        _file("e-odd-block.bin", block_size=5_000_000),
        _file("f-older-sync.bin", synced_ms=SYNCED - 86_400_000),
        _file("g-own-uri.bin", ufs_uri="s3://elsewhere/x", file_id="f" * 32),
        _file("h-other-mount.bin", mount_path="/other"),
        _file("i-empty.bin", size=0),
        _file("j-\u00e9t\u00e9 \U0001f600.bin"),
        Inode(
            path=f"{PLACE.directory}/k-dir",
            is_dir=True,
            mtime_ms=7,
            mount_path="/data",
            synced_ms=SYNCED,
            listed_ms=SYNCED - 5,
            tree_listed_ms=SYNCED - 9,
        ),
    ]
    assert _round_trip(inodes) == inodes


def test_one_entry_is_found_without_the_others_and_absent_names_are_none() -> None:
    inodes = [_file(f"img-{i:06d}.jpg") for i in range(0, 64, 2)]
    raw = encode_chunk([entry(i, PLACE) for i in inodes], PLACE)
    assert find_in_chunk(raw, "img-000010.jpg", PLACE) == inodes[5]
    assert find_in_chunk(raw, "img-000011.jpg", PLACE) is None
    assert find_in_chunk(raw, "zzz", PLACE) is None
    assert find_in_chunk(raw, "a", PLACE) is None


def test_entries_read_back_from_a_chunk_encode_to_the_same_chunk() -> None:
    inodes = [_file(f"img-{i:06d}.jpg", synced_ms=SYNCED - i) for i in range(20)]
    raw = encode_chunk([entry(i, PLACE) for i in inodes], PLACE)
    assert encode_chunk(list(iter_chunk(raw)), PLACE) == raw


def test_a_typical_s3_file_costs_under_40_bytes_in_a_chunk() -> None:
    # Images of a sharded data set, as a directory listing stores them: one moment, S3
    # second-resolution mtimes, MD5 ETags, the mount's block size.
    inodes = [
        _file(f"img-{i:06d}.jpg", etag=f"{i * 7919:032x}", size=100_000 + i * 37)
        for i in range(123, 123 + 64)
    ]
    raw = encode_chunk([entry(i, PLACE) for i in inodes], PLACE)
    per_file = len(raw) / len(inodes)
    assert per_file <= 40, per_file
    # What the JSON form spent on the same inodes.
    assert sum(len(i.to_json()) for i in inodes) / len(inodes) > 10 * per_file


def test_a_reports_facts_of_a_chunk_agree_with_its_decoded_inodes() -> None:
    inodes = [
        _file("a-multipart.bin", etag="0123456789abcdef0123456789abcdef-17"),
        _file("b-odd-etag.bin", etag="W/not-an-md5"),
        _file("c-odd-block.bin", block_size=5_000_000, size=12_000_000),
        _file("d-own-uri.bin", ufs_uri="s3://elsewhere/x", file_id="f" * 32),
        _file("e-own-id.bin", file_id="e" * 32),
        _file("f-empty.bin", size=0),
        Inode(path=f"{PLACE.directory}/g-dir", is_dir=True, mount_path="/data"),
        *(_file(f"img-{i:06d}.jpg", etag=f"{i:032x}", size=i * 1000) for i in range(50)),
    ]
    raw = encode_chunk([entry(i, PLACE) for i in inodes], PLACE)
    decoded = decode_chunk(raw, PLACE)
    files, directories = file_facts(raw, PLACE, with_ids=True)
    assert files == [(i.size, i.block_size, i.file_id) for i in decoded if not i.is_dir]
    assert directories == ["g-dir"]
    assert file_facts(raw, PLACE, with_ids=False)[0] == [(s, b, "") for s, b, _ in files]


def test_what_a_file_was_written_with_round_trips_and_others_pay_nothing_for_it() -> None:
    written = ObjectMetadata.of(
        {"Team": "vision", "run": "42"}, content_type="text/html", cache_control="max-age=60"
    )
    files = [_file("a.html", metadata=written), _file("b.jpg")]
    raw = encode_chunk([entry(i, PLACE) for i in files], PLACE)
    assert decode_chunk(raw, PLACE) == files
    assert find_in_chunk(raw, "a.html", PLACE) == files[0]
    assert dict(files[0].metadata.user) == {"team": "vision", "run": "42"}
    plain = encode_chunk([entry(files[1], PLACE)], PLACE)
    assert len(entry(files[1], PLACE).body) == len(entry(_file("b.jpg"), PLACE).body)
    assert decode_chunk(plain, PLACE) == [files[1]]
    sizes = file_facts(raw, PLACE, with_ids=True)[0]
    assert sizes == [(f.size, f.block_size, f.file_id) for f in files]


def test_user_metadata_over_s3s_two_kib_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        ObjectMetadata.of({"big": "x" * 2048})
    with pytest.raises(InvalidArgument):
        ObjectMetadata.of({"bad name": "x"})
