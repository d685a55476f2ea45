"""Opening under-stores: by URI, and one per mount, reopened whenever the mount changes."""

from __future__ import annotations

from urllib.parse import urlsplit

from .errors import InvalidArgument
from .local_under_store import LocalUnderStore
from .models import Mount, MountOptions
from .s3_under_store import S3UnderStore
from .under_store import BodyRetry, UnderStore, UnderStoreSettings


class MountedStores:
    """One open under-store per mount, opened on first use and reopened whenever the mount
    changed (remounted: a new URI, endpoint, region, credential source or block size).
    Credentials are resolved here, in this process, never stored."""

    def __init__(
        self,
        timeout_s: float,
        retries: int = 3,
        max_connections: int = 16,
        body_retry: BodyRetry | None = None,
    ) -> None:
        self._timeout_s = timeout_s
        self._retries = retries
        self._max_connections = max_connections
        self._body_retry = body_retry or BodyRetry()
        self._open: dict[str, tuple[Mount, UnderStore]] = {}

    def settings(self, options: MountOptions, retries: int | None = None) -> UnderStoreSettings:
        return UnderStoreSettings(
            endpoint_url=options.endpoint_url,
            region=options.region,
            credentials=options.credentials,
            timeout_s=self._timeout_s,
            retries=self._retries if retries is None else retries,
            max_connections=self._max_connections,
            body_retry=self._body_retry,
        )

    def for_mount(self, mount: Mount) -> UnderStore:
        opened = self._open.get(mount.path)
        if opened is not None and opened[0] == mount:
            return opened[1]
        ufs = open_under_store(mount.uri, self.settings(mount.options))
        self._open[mount.path] = (mount, ufs)
        return ufs

    def forget(self, mount_path: str) -> None:
        self._open.pop(mount_path, None)


def open_under_store(uri: str, settings: UnderStoreSettings) -> UnderStore:
    scheme = urlsplit(uri).scheme
    if scheme == "s3":
        return S3UnderStore(uri, settings)
    if scheme == "file":
        return LocalUnderStore(uri)
    raise InvalidArgument(
        f"unsupported under-store URI {uri!r} (s3://bucket/prefix or file:///dir)"
    )
