"""Under-stores: where the data really lives. Backends are chosen by the mount's URI.

`s3://bucket/prefix/` (S3 and S3-compatible stores through boto3) and `file:///dir/`
(a local or network file system). Keys passed to a store are relative to the mount's
root. Both pass tests/contract.
"""

from __future__ import annotations

import abc
import configparser
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ReservoirError,
    Unavailable,
)
from .models import Mount, MountOptions
from .redaction import install as redact_sdk_logs


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str  # relative to the store's root
    size: int
    mtime_ms: int
    etag: str


@dataclass(frozen=True, slots=True)
class Listing:
    objects: list[ObjectInfo]
    prefixes: list[str]  # relative "directories", without the trailing slash


@dataclass(frozen=True, slots=True)
class UnderStoreSettings:
    endpoint_url: str = ""
    region: str = ""
    credentials: str = ""  # "", "env", "anonymous" or "file:/path"
    timeout_s: float = 10.0
    retries: int = 3
    max_connections: int = 16


class UnderStore(abc.ABC):
    uri: str

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """The object's metadata; NotFound when no object has this key."""

    @abc.abstractmethod
    def list(self, prefix: str) -> Listing:
        """One level below `prefix` ('' is the root; otherwise it ends with '/')."""

    @abc.abstractmethod
    def get_range(self, key: str, offset: int, length: int, etag: str = "") -> bytes:
        """`length` bytes from `offset`; Conflict when the object's ETag is no longer `etag`."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> ObjectInfo: ...

    @abc.abstractmethod
    def check(self) -> None:
        """Raises a clear error when the store cannot be reached or read."""

    def uri_of(self, key: str) -> str:
        return self.uri + key

    def key_of(self, uri: str) -> str:
        if not uri.startswith(self.uri):
            raise InvalidArgument(f"{uri!r} is not under {self.uri!r}")
        return uri[len(self.uri) :]


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]$")


def _s3_error(exc: Exception, what: str) -> ReservoirError:
    import botocore.exceptions as bce

    if isinstance(exc, bce.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in ("NoSuchKey", "NoSuchBucket", "404", "NotFound") or status == 404:
            return NotFound(f"{what}: not found in the under-store")
        if code in ("AccessDenied", "403", "Forbidden", "InvalidAccessKeyId") or status == 403:
            return PermissionDenied(f"{what}: access denied by the under-store")
        if code in ("PreconditionFailed", "412") or status == 412:
            return Conflict(f"{what}: the object changed (ETag mismatch)")
        if code == "InvalidRange" or status == 416:
            return OutOfRange(f"{what}: range not satisfiable")
        return Unavailable(f"{what}: under-store error {code or status}")
    if isinstance(exc, bce.NoCredentialsError):
        return PermissionDenied(f"{what}: no credentials found for the under-store")
    if isinstance(exc, bce.EndpointConnectionError | bce.ConnectTimeoutError):
        return Unavailable(f"{what}: cannot connect to the under-store endpoint")
    if isinstance(exc, bce.ReadTimeoutError):
        return Unavailable(f"{what}: the under-store did not answer in time")
    if isinstance(exc, bce.BotoCoreError):
        return Unavailable(f"{what}: {type(exc).__name__}")
    return Unavailable(f"{what}: {type(exc).__name__}: {exc}")


def _read_credentials_file(path: str) -> tuple[str, str, str | None]:
    """An AWS shared-credentials style file (a Kubernetes Secret mounted as a file)."""
    parser = configparser.ConfigParser()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PermissionDenied(f"cannot read credentials file {path}: {exc.strerror}") from exc
    if not text.lstrip().startswith("["):
        text = "[default]\n" + text
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        # The parser's message quotes the offending line: never echo a file's content.
        raise InvalidArgument(
            f"credentials file {path} is not an AWS credentials file ({type(exc).__name__})"
        ) from None
    if not parser.sections():
        raise InvalidArgument(f"credentials file {path} has no section")
    section = parser["default"] if parser.has_section("default") else parser[parser.sections()[0]]
    try:
        return (
            section["aws_access_key_id"],
            section["aws_secret_access_key"],
            section.get("aws_session_token"),
        )
    except KeyError as exc:
        raise InvalidArgument(f"credentials file {path} lacks {exc.args[0]}") from exc


class S3UnderStore(UnderStore):
    def __init__(self, uri: str, settings: UnderStoreSettings) -> None:
        import boto3
        import botocore
        from botocore.config import Config

        parts = urlsplit(uri)
        bucket = parts.netloc
        if not _BUCKET.match(bucket):
            raise InvalidArgument(f"bad S3 bucket name in {uri!r}")
        prefix = parts.path.lstrip("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        self.uri = f"s3://{bucket}/{prefix}"
        self.bucket = bucket
        self.prefix = prefix
        config_args: dict[str, Any] = {
            "connect_timeout": settings.timeout_s,
            "read_timeout": settings.timeout_s,
            "retries": {"max_attempts": max(1, settings.retries), "mode": "standard"},
            "max_pool_connections": settings.max_connections,
            "s3": {"addressing_style": "path"},
        }
        session_args: dict[str, Any] = {}
        source = settings.credentials
        if source == "anonymous":
            config_args["signature_version"] = botocore.UNSIGNED
        elif source.startswith("file:"):
            key, secret, token = _read_credentials_file(source[len("file:") :])
            session_args = {
                "aws_access_key_id": key,
                "aws_secret_access_key": secret,
                "aws_session_token": token,
            }
        elif source not in ("", "env"):
            raise InvalidArgument(
                f"unknown credential source {source!r} (env, anonymous or file:/path)"
            )
        redact_sdk_logs()
        session = boto3.session.Session(**session_args)
        self._s3 = session.client(
            "s3",
            endpoint_url=settings.endpoint_url or None,
            region_name=settings.region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            config=Config(**config_args),
        )
        redact_sdk_logs()  # the client has imported more of botocore: its loggers too

    def head(self, key: str) -> ObjectInfo:
        try:
            r = self._s3.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except Exception as exc:
            raise _s3_error(exc, f"head {self.uri_of(key)}") from exc
        return ObjectInfo(
            key=key,
            size=int(r["ContentLength"]),
            mtime_ms=int(r["LastModified"].timestamp() * 1000),
            etag=str(r.get("ETag", "")).strip('"'),
        )

    def list(self, prefix: str) -> Listing:
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        full = self.prefix + prefix
        try:
            pages = self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=full, Delimiter="/"
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    rel = item["Key"][len(self.prefix) :]
                    if rel == prefix:  # a "directory marker" object
                        continue
                    objects.append(
                        ObjectInfo(
                            key=rel,
                            size=int(item["Size"]),
                            mtime_ms=int(item["LastModified"].timestamp() * 1000),
                            etag=str(item.get("ETag", "")).strip('"'),
                        )
                    )
                for common in page.get("CommonPrefixes", ()):
                    prefixes.append(common["Prefix"][len(self.prefix) :].rstrip("/"))
        except Exception as exc:
            raise _s3_error(exc, f"list {self.uri_of(prefix)}") from exc
        return Listing(objects, prefixes)

    def get_range(self, key: str, offset: int, length: int, etag: str = "") -> bytes:
        if length <= 0:
            return b""
        args: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self.prefix + key,
            "Range": f"bytes={offset}-{offset + length - 1}",
        }
        if etag:
            args["IfMatch"] = etag
        try:
            body = self._s3.get_object(**args)["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()
        except Exception as exc:
            raise _s3_error(exc, f"get {self.uri_of(key)}") from exc

    def put(self, key: str, data: bytes) -> ObjectInfo:
        try:
            self._s3.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)
        except Exception as exc:
            raise _s3_error(exc, f"put {self.uri_of(key)}") from exc
        return self.head(key)

    def check(self) -> None:
        try:
            self._s3.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        except Exception as exc:
            raise _s3_error(exc, f"mount {self.uri}") from exc


class LocalUnderStore(UnderStore):
    """A directory as an under-store. The ETag is derived from mtime and size."""

    def __init__(self, uri: str) -> None:
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise InvalidArgument(f"file URI must be file:///absolute/path, got {uri!r}")
        root = parts.path.rstrip("/") + "/"
        self.root = Path(root)
        self.uri = f"file://{root}"

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise InvalidArgument(f"bad key {key!r}")
        return self.root / key

    @staticmethod
    def _info(key: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(
            key, st.st_size, st.st_mtime_ns // 1_000_000, f"{st.st_mtime_ns:x}-{st.st_size:x}"
        )

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = path.stat()
        except FileNotFoundError as exc:
            raise NotFound(f"head {self.uri_of(key)}: not found in the under-store") from exc
        if not path.is_file():
            raise NotFound(f"head {self.uri_of(key)}: not a file")
        return self._info(key, st)

    def list(self, prefix: str) -> Listing:
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        try:
            with os.scandir(self._path(prefix)) as it:
                entries = sorted(it, key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return Listing([], [])
        for entry in entries:
            if entry.is_dir():
                prefixes.append(prefix + entry.name)
            elif entry.is_file():
                objects.append(self._info(prefix + entry.name, entry.stat()))
        return Listing(objects, prefixes)

    def get_range(self, key: str, offset: int, length: int, etag: str = "") -> bytes:
        path = self._path(key)
        try:
            with path.open("rb") as f:
                if etag and self._info(key, os.fstat(f.fileno())).etag != etag:
                    raise Conflict(f"get {self.uri_of(key)}: the object changed")
                f.seek(offset)
                return f.read(max(0, length))
        except FileNotFoundError as exc:
            raise NotFound(f"get {self.uri_of(key)}: not found in the under-store") from exc

    def put(self, key: str, data: bytes) -> ObjectInfo:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".reservoir-tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return self.head(key)

    def check(self) -> None:
        if not self.root.is_dir():
            raise NotFound(f"mount {self.uri}: no such directory")


class MountedStores:
    """One open under-store per mount, opened on first use and reopened when the mount
    now points elsewhere. Credentials are resolved here, in this process, never stored."""

    def __init__(self, timeout_s: float, retries: int = 3, max_connections: int = 16) -> None:
        self._timeout_s = timeout_s
        self._retries = retries
        self._max_connections = max_connections
        self._open: dict[str, UnderStore] = {}

    def settings(self, options: MountOptions, retries: int | None = None) -> UnderStoreSettings:
        return UnderStoreSettings(
            endpoint_url=options.endpoint_url,
            region=options.region,
            credentials=options.credentials,
            timeout_s=self._timeout_s,
            retries=self._retries if retries is None else retries,
            max_connections=self._max_connections,
        )

    def for_mount(self, mount: Mount) -> UnderStore:
        ufs = self._open.get(mount.path)
        if ufs is None or ufs.uri != mount.uri:
            ufs = open_under_store(mount.uri, self.settings(mount.options))
            self._open[mount.path] = ufs
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
