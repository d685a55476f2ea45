"""Where an S3 request points in the namespace: bucket = the first component of a
Reservoir path, key = the rest (`s3://datasets/a/b.jpg` is `/datasets/a/b.jpg`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from reservoir.common import paths
from reservoir.common.errors import InvalidArgument, NotFound

from .s3_errors import no_such_bucket

if TYPE_CHECKING:
    from reservoir.client.async_client import AsyncClient


@dataclass(frozen=True)
class Target:
    bucket: str  # "" for the service (ListBuckets)
    key: str  # "" for the bucket itself

    @property
    def bucket_path(self) -> str:
        return "/" + self.bucket

    def object_path(self) -> str | None:
        """The key's Reservoir path; None when no path can be the key (`a//b`, `a/../b`,
        a trailing `/`): such a key names no object."""
        if not self.key or self.key.endswith("/"):
            return None
        try:
            path = paths.normalize(f"/{self.bucket}/{self.key}")
        except InvalidArgument:
            return None
        return path if path == f"/{self.bucket}/{self.key}" else None

    @classmethod
    def of(cls, raw_path: str, host: str, domain: str) -> Target:
        """From the request's path as sent (percent-encoded) and its Host: virtual-host
        style when the host is `BUCKET.<domain>`, else path style."""
        path = unquote(raw_path.split("?", 1)[0])
        hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if domain and hostname.endswith("." + domain):
            return cls(hostname[: -len(domain) - 1], path[1:])
        bucket, _, key = path[1:].partition("/")
        return cls(bucket, key)

    def valid_bucket(self) -> bool:
        """Whether the bucket can be a top-level directory's name."""
        return bool(self.bucket) and self.bucket not in (".", "..") and "\x00" not in self.bucket


async def check_bucket(client: AsyncClient, target: Target) -> None:
    """NoSuchBucket unless the target's bucket is a directory of the namespace."""
    try:
        inode = await client.stat(target.bucket_path)
    except NotFound:
        raise no_such_bucket(target.bucket) from None
    if not inode.is_dir:
        raise no_such_bucket(target.bucket)
