"""What an object says of itself beside its bytes: the system metadata a writer sets
(Content-Type and kin) and user metadata (S3's x-amz-meta-*). A writer gives it; the
under-store keeps it with the object and the namespace with the inode, so a reader gets
it back without asking the store."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from reservoir.common.errors import InvalidArgument
from reservoir.v1 import common_pb2

# S3's bound on user metadata (names and values, in bytes): also what an inode may carry.
MAX_USER_BYTES = 2048


@dataclass(frozen=True, slots=True)
class ObjectMetadata:
    content_type: str = ""
    content_encoding: str = ""
    content_disposition: str = ""
    cache_control: str = ""
    content_language: str = ""
    # (name, value) pairs sorted by name; names lower case, without x-amz-meta-.
    user: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    @classmethod
    def of(cls, user: dict[str, str] | None = None, **system: str) -> ObjectMetadata:
        """Checked: user metadata within S3's 2 KiB, names that can travel as headers."""
        pairs = tuple(sorted((k.lower(), v) for k, v in (user or {}).items()))
        size = sum(len(k.encode()) + len(v.encode()) for k, v in pairs)
        if size > MAX_USER_BYTES:
            raise InvalidArgument(
                f"user metadata of {size} bytes: at most {MAX_USER_BYTES} (S3's bound)"
            )
        for name, value in pairs:
            if not name or not name.isascii() or any(c in name for c in " :\r\n\t"):
                raise InvalidArgument(f"user metadata name {name!r} cannot be a header name")
            if any(c in value for c in "\r\n"):
                raise InvalidArgument(f"user metadata {name!r}: a value has no line breaks")
        return cls(user=pairs, **system)

    def store_args(self) -> dict[str, Any]:
        """The boto3 arguments of PutObject and CreateMultipartUpload that set it."""
        args: dict[str, Any] = {
            name: value
            for name, value in (
                ("ContentType", self.content_type),
                ("ContentEncoding", self.content_encoding),
                ("ContentDisposition", self.content_disposition),
                ("CacheControl", self.cache_control),
                ("ContentLanguage", self.content_language),
            )
            if value
        }
        if self.user:
            args["Metadata"] = dict(self.user)
        return args

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "user" and getattr(self, f.name)
        }
        if self.user:
            data["user"] = dict(self.user)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ObjectMetadata:
        data = dict(data)
        user = data.pop("user", {})
        return cls(user=tuple(sorted(user.items())), **data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str) -> ObjectMetadata:
        return cls.from_dict(json.loads(raw))

    def to_proto(self) -> common_pb2.ObjectMetadata:
        return common_pb2.ObjectMetadata(
            content_type=self.content_type,
            content_encoding=self.content_encoding,
            content_disposition=self.content_disposition,
            cache_control=self.cache_control,
            content_language=self.content_language,
            user=dict(self.user),
        )

    @classmethod
    def from_proto(cls, msg: common_pb2.ObjectMetadata) -> ObjectMetadata:
        return cls.of(
            dict(msg.user),
            content_type=msg.content_type,
            content_encoding=msg.content_encoding,
            content_disposition=msg.content_disposition,
            cache_control=msg.cache_control,
            content_language=msg.content_language,
        )
