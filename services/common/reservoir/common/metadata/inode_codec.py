"""The compact binary form of a chunk of one directory's inodes (etcd budgets ~100 bytes
per file, so a file's entry is ~35 bytes and a key carries dozens of them).

A chunk holds a directory's children in name order. What the mount table and the path
already say is not stored: a child's path is the directory's path plus its name, its
`mount_path` and `ufs_uri` follow from the mount, and its `file_id` from (URI, ETag,
size, block size). Each such field is stored only when it says something else. Names are
prefix-compressed against the previous one, integers are varints, an MD5 ETag (32 hex
digits, `-N` for a multipart one) is 16 bytes, an S3 mtime (whole seconds) is stored in
seconds, a power-of-two block size as its exponent, and `synced_ms` as its distance from
the chunk's latest one (a listing writes a directory's entries at one moment).

Layout: version byte, varint latest synced_ms, varint count, then per entry: varint
shared-prefix length, varint suffix length, suffix, varint body length, body. The body
length lets a lookup skip the entries it does not want without decoding them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from reservoir.common.errors import DataLoss
from reservoir.common.models import Inode, file_id_for
from reservoir.common.object_metadata import ObjectMetadata

VERSION = 2
_MAGIC = bytes([VERSION])

_DIR = 1
_ETAG_MD5 = 2  # 16 bytes of the 32 lowercase hex digits
_ETAG_PARTS = 4  # with _ETAG_MD5: "-" and a varint number of parts follow the digest
_MTIME_S = 8  # mtime in whole seconds
_BLOCK_LOG2 = 16  # block size as one byte: its base-2 exponent
_LISTED = 32  # directories: varint listed_ms and tree_listed_ms follow
_URI = 64  # ufs_uri stored (not the mount's URI plus the path)
_FILE_ID = 128  # file_id stored (not derived)
_MOUNT = 256  # mount_path stored (not the mount's)
_METADATA = 512  # what the file was written with (content type, user metadata), as JSON

_MD5 = re.compile(r"[0-9a-f]{32}(-[1-9][0-9]*)?")


@dataclass(frozen=True, slots=True)
class ChunkPlace:
    """What every entry of a chunk shares: its directory, and where that lies."""

    directory: str  # the parent directory's path
    mount_path: str  # the mount its children lie in
    mount_uri: str  # that mount's under-store URI (ends with "/")

    def path_of(self, name: str) -> str:
        return ("" if self.directory == "/" else self.directory) + "/" + name

    def uri_of(self, path: str) -> str:
        """A file's under-store URI, as the mount's under-store names it."""
        return self.mount_uri + path[len(self.mount_path) + 1 :]


def _varint(value: int, out: bytearray) -> None:
    if value < 0:
        raise ValueError(f"varint of a negative number {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _text(value: str, out: bytearray) -> None:
    raw = value.encode()
    _varint(len(raw), out)
    out += raw


def _read_text(data: bytes, pos: int) -> tuple[str, int]:
    length, pos = _read_varint(data, pos)
    return data[pos : pos + length].decode(), pos + length


def encode_body(inode: Inode, place: ChunkPlace, synced_base_ms: int) -> bytes:
    """One inode's fields without its name."""
    flags = _DIR if inode.is_dir else 0
    tail = bytearray()
    _varint(inode.size, tail)
    mtime = inode.mtime_ms
    if mtime % 1000 == 0:
        flags |= _MTIME_S
        mtime //= 1000
    _varint(mtime, tail)
    if _MD5.fullmatch(inode.etag):
        flags |= _ETAG_MD5
        tail += bytes.fromhex(inode.etag[:32])
        if len(inode.etag) > 32:
            flags |= _ETAG_PARTS
            _varint(int(inode.etag[33:]), tail)
    else:
        _text(inode.etag, tail)
    block_size = inode.block_size
    if block_size > 0 and block_size & (block_size - 1) == 0:
        flags |= _BLOCK_LOG2
        tail.append(block_size.bit_length() - 1)
    else:
        _varint(block_size, tail)
    _varint(synced_base_ms - inode.synced_ms, tail)
    if inode.listed_ms or inode.tree_listed_ms:
        flags |= _LISTED
        _varint(inode.listed_ms, tail)
        _varint(inode.tree_listed_ms, tail)
    uri = "" if inode.is_dir else place.uri_of(inode.path)
    if inode.ufs_uri != uri:
        flags |= _URI
        _text(inode.ufs_uri, tail)
        uri = inode.ufs_uri
    derived_id = "" if inode.is_dir else file_id_for(uri, inode.etag, inode.size, block_size)
    if inode.file_id != derived_id:
        flags |= _FILE_ID
        _text(inode.file_id, tail)
    if inode.mount_path != place.mount_path:
        flags |= _MOUNT
        _text(inode.mount_path, tail)
    if inode.metadata:
        flags |= _METADATA
        _text(inode.metadata.to_json(), tail)
    body = bytearray()
    _varint(flags, body)
    return bytes(body + tail)


def decode_body(body: bytes, path: str, place: ChunkPlace, synced_base_ms: int) -> Inode:
    # Varints are read inline where one byte is the common case: a report decodes
    # millions of bodies, and a call per field would be most of its time.
    flags = body[0]
    pos = 1
    if flags & 0x80:
        flags, pos = _read_varint(body, 0)
    size = body[pos]
    if size < 0x80:
        pos += 1
    else:
        size, pos = _read_varint(body, pos)
    mtime = shift = 0
    while True:
        byte = body[pos]
        pos += 1
        mtime |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    if flags & _MTIME_S:
        mtime *= 1000
    if flags & _ETAG_MD5:
        etag = body[pos : pos + 16].hex()
        pos += 16
        if flags & _ETAG_PARTS:
            parts, pos = _read_varint(body, pos)
            etag += f"-{parts}"
    else:
        etag, pos = _read_text(body, pos)
    if flags & _BLOCK_LOG2:
        block_size = 1 << body[pos]
        pos += 1
    else:
        block_size, pos = _read_varint(body, pos)
    age = body[pos]
    if age < 0x80:
        pos += 1
    else:
        age, pos = _read_varint(body, pos)
    listed = tree_listed = 0
    if flags & _LISTED:
        listed, pos = _read_varint(body, pos)
        tree_listed, pos = _read_varint(body, pos)
    is_dir = bool(flags & _DIR)
    uri = "" if is_dir else place.uri_of(path)
    if flags & _URI:
        uri, pos = _read_text(body, pos)
    if flags & _FILE_ID:
        file_id, pos = _read_text(body, pos)
    else:
        file_id = "" if is_dir else file_id_for(uri, etag, size, block_size)
    mount_path = place.mount_path
    if flags & _MOUNT:
        mount_path, pos = _read_text(body, pos)
    # Positional: measurably faster than keywords at millions of inodes.
    inode = Inode(
        path,
        is_dir,
        size,
        mtime,
        etag,
        block_size,
        file_id,
        uri,
        mount_path,
        synced_base_ms - age,
        listed,
        tree_listed,
    )
    if flags & _METADATA:
        written, pos = _read_text(body, pos)
        inode = replace(inode, metadata=ObjectMetadata.from_json(written))
    return inode


@dataclass(frozen=True, slots=True)
class RawEntry:
    """One entry of a chunk, its fields still encoded: re-encoding a chunk after a change
    to one entry leaves the others as they were."""

    name: str
    body: bytes
    synced_ms: int


def is_dir_entry(item: RawEntry) -> bool:
    return bool(item.body[0] & _DIR)


def count_entries(raw: bytes) -> tuple[int, int]:
    """(files, directories) in a chunk, read from each entry's flags alone."""
    directories = total = 0
    for _, body, _ in _framed(raw):
        total += 1
        directories += body[0] & _DIR
    return total - directories, directories


def entry(inode: Inode, place: ChunkPlace) -> RawEntry:
    name = inode.path.rsplit("/", 1)[1]
    # Bodies are stored relative to the chunk's latest synced_ms; a fresh entry is its
    # own base until the chunk is encoded.
    return RawEntry(name, encode_body(inode, place, inode.synced_ms), inode.synced_ms)


def encode_chunk(entries: Sequence[RawEntry], place: ChunkPlace) -> bytes:
    """A chunk of entries, sorted by name, each name once."""
    base = max((e.synced_ms for e in entries), default=0)
    out = bytearray(_MAGIC)
    _varint(base, out)
    _varint(len(entries), out)
    previous = b""
    for item in entries:
        body = item.body
        if item.synced_ms != base:
            body = _rebase(body, item.synced_ms, base)
        name = item.name.encode()
        shared = 0
        limit = min(len(name), len(previous))
        while shared < limit and name[shared] == previous[shared]:
            shared += 1
        _varint(shared, out)
        _varint(len(name) - shared, out)
        out += name[shared:]
        _varint(len(body), out)
        out += body
        previous = name
    return bytes(out)


def _age_span(body: bytes) -> tuple[int, int]:
    """Where a body's synced_ms age varint starts and ends."""
    flags, pos = _read_varint(body, 0)
    for _ in range(2):  # size, mtime
        _, pos = _read_varint(body, pos)
    if flags & _ETAG_MD5:
        pos += 16
        if flags & _ETAG_PARTS:
            _, pos = _read_varint(body, pos)
    else:
        length, pos = _read_varint(body, pos)
        pos += length
    if flags & _BLOCK_LOG2:
        pos += 1
    else:
        _, pos = _read_varint(body, pos)
    return pos, _read_varint(body, pos)[1]


def _rebase(body: bytes, synced_ms: int, base: int) -> bytes:
    """`body` with its synced_ms stored relative to `base`."""
    start, end = _age_span(body)
    age = bytearray()
    _varint(base - synced_ms, age)
    return body[:start] + bytes(age) + body[end:]


def _framed(raw: bytes) -> Iterator[tuple[bytes, bytes, int]]:
    """(name, body, the chunk's base time) of each entry of a chunk, in name order: the
    one reading of the framing that every decoder shares. Varints below 0x80 (nearly every
    one) are read inline: a report reads millions of entries."""
    if not raw or raw[0] != VERSION:
        raise DataLoss(f"not a namespace chunk (version byte {raw[:1]!r})")
    base, pos = _read_varint(raw, 1)
    count, pos = _read_varint(raw, pos)
    previous = b""
    for _ in range(count):
        shared = raw[pos]
        if shared < 0x80:
            pos += 1
        else:
            shared, pos = _read_varint(raw, pos)
        length = raw[pos]
        if length < 0x80:
            pos += 1
        else:
            length, pos = _read_varint(raw, pos)
        name = previous[:shared] + raw[pos : pos + length]
        pos += length
        size = raw[pos]
        if size < 0x80:
            pos += 1
        else:
            size, pos = _read_varint(raw, pos)
        yield name, raw[pos : pos + size], base
        pos += size
        previous = name


def iter_chunk(raw: bytes) -> Iterator[RawEntry]:
    """The entries of a chunk, bodies relative to themselves (see `entry`)."""
    for name, body, base in _framed(raw):
        synced = base - _age(body)
        yield RawEntry(name.decode(), _rebase(body, synced, synced), synced)


def _age(body: bytes) -> int:
    return _read_varint(body, _age_span(body)[0])[0]


def decode_chunk(raw: bytes, place: ChunkPlace) -> list[Inode]:
    """Every inode of a chunk, in name order."""
    parent = place.path_of("")
    return [
        decode_body(body, parent + name.decode(), place, base) for name, body, base in _framed(raw)
    ]


def file_facts(
    raw: bytes, place: ChunkPlace, with_ids: bool
) -> tuple[list[tuple[int, int, str]], list[str]]:
    """What a report adds up, without building inodes: (size, block size, file_id) of
    each file of a chunk (file_id '' unless `with_ids`: deriving it is most of the cost),
    and the names of its directories (for the walk to go on)."""
    files: list[tuple[int, int, str]] = []
    directories: list[str] = []
    uri_base = place.uri_of(place.path_of("-"))[:-1]  # a file's URI is this + its name
    for name, body, base in _framed(raw):
        flags = body[0]
        if flags & _DIR:
            directories.append(name.decode())
            continue
        if flags & 0x80 or flags & _URI or not flags & _BLOCK_LOG2 or not flags & _ETAG_MD5:
            # Anything unusual: the full decoding.
            inode = decode_body(body, place.path_of(name.decode()), place, base)
            files.append((inode.size, inode.block_size, inode.file_id if with_ids else ""))
            continue
        file_size = shift = 0
        at = 1
        while True:
            byte = body[at]
            at += 1
            file_size |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        while body[at] & 0x80:  # mtime
            at += 1
        etag = body[at + 1 : at + 17].hex()
        at += 17
        if flags & _ETAG_PARTS:
            parts, at = _read_varint(body, at)
            etag += f"-{parts}"
        block_size = 1 << body[at]
        file_id = ""
        if with_ids:
            file_id = file_id_for(uri_base + name.decode(), etag, file_size, block_size)
        files.append((file_size, block_size, file_id))
    return files, directories


def find_in_chunk(raw: bytes, name: str, place: ChunkPlace) -> Inode | None:
    """The entry `name` of a chunk, decoding only that one."""
    if not raw or raw[0] != VERSION:
        raise DataLoss(f"not a namespace chunk (version byte {raw[:1]!r})")
    wanted = name.encode()
    base, pos = _read_varint(raw, 1)
    count, pos = _read_varint(raw, pos)
    previous = b""
    for _ in range(count):
        shared, pos = _read_varint(raw, pos)
        length, pos = _read_varint(raw, pos)
        current = previous[:shared] + raw[pos : pos + length]
        pos += length
        size, pos = _read_varint(raw, pos)
        if current == wanted:
            return decode_body(raw[pos : pos + size], place.path_of(name), place, base)
        if current > wanted:
            return None
        pos += size
        previous = current
    return None
