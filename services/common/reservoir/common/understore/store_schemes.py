"""The one place under-store URI schemes are named: each backend's scheme(s), what a mount
of it can do, and how to open it. The store factory (`mounted_stores.py`), the master's
mount policy and its mount table read this registry; nothing else spells a scheme.

Adding a store is one backend module and one `register` call here. Openers import their
backend lazily: boto3 alone costs ~0.3 s to import, and a process that never opens an S3
mount should not pay it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from reservoir.common.errors import InvalidArgument
from reservoir.common.paths import shown

if TYPE_CHECKING:
    from reservoir.common.understore.under_store import UnderStore, UnderStoreSettings

Opener = Callable[[str, "UnderStoreSettings"], "UnderStore"]


@dataclass(frozen=True, slots=True)
class StoreScheme:
    name: str
    example: str  # the URI's shape, as error messages show it
    opener: Opener
    # A mount can be listed (`ls`, LoadMetadata of a directory); without it, files are
    # opened by path only.
    lists: bool = True
    # A mount may be made writable (writes go through to the store).
    writes: bool = False
    # The URI's own host is the endpoint (http): the mount policy checks it as it checks
    # an endpoint_url, and a separate endpoint_url has no meaning.
    endpoint_in_uri: bool = False
    # Where a mount without endpoint_url sends its requests ("" when nowhere else).
    default_endpoint: str = ""


_SCHEMES: dict[str, StoreScheme] = {}


def register(scheme: StoreScheme) -> None:
    if scheme.name in _SCHEMES:
        raise ValueError(f"under-store scheme {scheme.name!r} is registered twice")
    _SCHEMES[scheme.name] = scheme


def registered() -> list[StoreScheme]:
    return sorted(_SCHEMES.values(), key=lambda s: s.name)


def scheme_of(uri: str) -> StoreScheme:
    """The registered scheme of `uri`; InvalidArgument naming the supported ones if none."""
    name = urlsplit(uri).scheme.lower()
    scheme = _SCHEMES.get(name)
    if scheme is None:
        shapes = ", ".join(s.example for s in registered())
        raise InvalidArgument(f"unsupported under-store URI {shown(uri)} (one of: {shapes})")
    return scheme


def open_store(uri: str, settings: UnderStoreSettings) -> UnderStore:
    return scheme_of(uri).opener(uri, settings)


def _open_s3(uri: str, settings: UnderStoreSettings) -> UnderStore:
    from reservoir.common.understore.s3_under_store import S3UnderStore

    return S3UnderStore(uri, settings)


def _open_file(uri: str, settings: UnderStoreSettings) -> UnderStore:
    from reservoir.common.understore.local_under_store import LocalUnderStore

    return LocalUnderStore(uri)


def _open_http(uri: str, settings: UnderStoreSettings) -> UnderStore:
    from reservoir.common.understore.http_under_store import HttpUnderStore

    return HttpUnderStore(uri, settings)


def _open_webhdfs(uri: str, settings: UnderStoreSettings) -> UnderStore:
    from reservoir.common.understore.webhdfs_under_store import WebHdfsUnderStore

    return WebHdfsUnderStore(uri, settings)


register(
    StoreScheme(
        "s3", "s3://bucket/prefix", _open_s3, writes=True, default_endpoint="s3.amazonaws.com:443"
    )
)


def _open_gcs(uri: str, settings: UnderStoreSettings) -> UnderStore:
    from reservoir.common.understore.gcs_under_store import GcsUnderStore

    return GcsUnderStore(uri, settings)


def _open_azure(uri: str, settings: UnderStoreSettings) -> UnderStore:
    from reservoir.common.understore.azure_under_store import AzureUnderStore

    return AzureUnderStore(uri, settings)


register(StoreScheme("file", "file:///dir", _open_file, writes=True))
register(
    StoreScheme(
        "gs",
        "gs://bucket/prefix",
        _open_gcs,
        writes=True,
        default_endpoint="storage.googleapis.com:443",
    )
)
# Azure's endpoint is the storage account's own host; the account is in the URI (abfs) or
# the credentials (az), so an allow-list of endpoints needs an explicit endpoint_url.
for _name, _example in (
    ("az", "az://container/prefix"),
    ("abfs", "abfs://container@account.dfs.core.windows.net/prefix"),
    ("abfss", "abfss://container@account.dfs.core.windows.net/prefix"),
):
    register(
        StoreScheme(
            _name,
            _example,
            _open_azure,
            writes=True,
            default_endpoint="<account>.blob.core.windows.net:443",
        )
    )
register(StoreScheme("http", "http://host/prefix/", _open_http, lists=False, endpoint_in_uri=True))
register(
    StoreScheme("https", "https://host/prefix/", _open_http, lists=False, endpoint_in_uri=True)
)
# hdfs:// is WebHDFS too (to the namenode's HTTP port): HDFS's RPC protocol is not spoken.
register(
    StoreScheme(
        "webhdfs", "webhdfs://namenode:port/path/", _open_webhdfs, writes=True, endpoint_in_uri=True
    )
)
register(
    StoreScheme(
        "hdfs", "hdfs://namenode:port/path/", _open_webhdfs, writes=True, endpoint_in_uri=True
    )
)
