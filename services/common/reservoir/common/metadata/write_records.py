"""A write in etcd (`writes/<id>`): what the master records of a file being written, read
back by the master (keep-alives, publish, the reaper) and by workers (whose staged blocks
may be kept only under the file id that write published)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

from reservoir.common.errors import InvalidArgument
from reservoir.common.metadata import keyspace
from reservoir.common.object_metadata import ObjectMetadata

WRITES = keyspace.ROOT + b"writes/"
_WRITE_ID = re.compile(r"^[0-9a-f]{32}$")  # uuid4().hex


def check_write_id(write_id: str) -> str:
    """`write_id` when it is one the master makes (it names keys and staged block files)."""
    if not _WRITE_ID.match(write_id):
        raise InvalidArgument("write_id is not a write's id")
    return write_id


def write_key(write_id: str) -> bytes:
    return WRITES + check_write_id(write_id).encode()


@dataclass(frozen=True, slots=True)
class WriteRecord:
    id: str
    path: str
    mount_path: str
    key: str  # the object's key, relative to the mount's store
    upload_id: str
    started_ms: int
    expires_ms: int
    # Set once published: the file id its staged blocks may be kept under, until
    # `expires_ms` (then the reaper drops the record; nothing is aborted).
    published_file_id: str = ""
    metadata: str = ""  # ObjectMetadata as JSON, "" for none
    # Checked at the publish, in one step with it (BeginWriteRequest).
    if_absent: bool = False
    if_match: str = ""
    # One PUT by the writer (upload_id ""): nothing to complete or abort in the store.
    whole: bool = False

    @property
    def object_metadata(self) -> ObjectMetadata:
        return ObjectMetadata.from_json(self.metadata) if self.metadata else ObjectMetadata()

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> WriteRecord:
        return cls(**json.loads(raw))
