"""A write request's body as the gateway reads it: streamed in chunks, `aws-chunked`
framing removed (boto3 frames bodies that way over HTTPS to send a checksum trailer), and
every digest the client gave checked once the last byte is in: Content-MD5 (BadDigest),
`x-amz-checksum-*` (a header or a trailer) and a payload SHA-256 the signature covers."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import crc32c
from aiohttp import StreamReader

from .s3_errors import S3Error, invalid_argument, not_implemented

_READ_BYTES = 1 << 20
_MAX_TRAILER_BYTES = 4096
_SIGNED_CHUNKS = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"


class _Crc:
    """A CRC (S3's checksums are the big-endian CRC, base64) with hashlib's interface."""

    def __init__(self, update: Callable[[bytes, int], int], width: int) -> None:
        self._update = update
        self._width = width
        self._value = 0

    def update(self, data: bytes) -> None:
        self._value = self._update(data, self._value)

    def digest(self) -> bytes:
        return self._value.to_bytes(self._width, "big")


def _checksum(name: str) -> Any:
    if name == "crc32":
        return _Crc(zlib.crc32, 4)
    if name == "crc32c":
        return _Crc(lambda data, value: int(crc32c.crc32c(data, value)), 4)
    if name in ("sha1", "sha256"):
        return hashlib.new(name)
    return None


def bad_digest() -> S3Error:
    return S3Error(
        "BadDigest", 400, "The Content-MD5 you specified did not match what we received."
    )


class BodyDigests:
    """The digests a request asks the gateway to check its body against."""

    def __init__(self, headers: Mapping[str, str], signatures_checked: bool) -> None:
        self._md5_expected: bytes | None = None
        md5 = headers.get("Content-MD5")
        if md5 is not None:
            try:
                self._md5_expected = base64.b64decode(md5, validate=True)
            except binascii.Error:
                raise S3Error(
                    "InvalidDigest", 400, "The Content-MD5 you specified was invalid."
                ) from None
        self._md5 = hashlib.md5(usedforsecurity=False) if md5 is not None else None
        self._checksums: dict[str, tuple[Any, str | None]] = {}
        announced = headers.get("x-amz-trailer", "").lower()
        for name in ("crc32", "crc32c", "sha1", "sha256"):
            field = f"x-amz-checksum-{name}"
            if field in headers or field == announced:
                self._checksums[field] = (_checksum(name), headers.get(field))
        payload = headers.get("x-amz-content-sha256", "")
        self._payload: Any = None
        self._payload_expected = ""
        if len(payload) == 64 and all(c in "0123456789abcdef" for c in payload.lower()):
            self._payload, self._payload_expected = hashlib.sha256(), payload.lower()
        elif payload == _SIGNED_CHUNKS and signatures_checked:
            # Each chunk carries a signature of its own; unchecked, a body could be swapped.
            raise not_implemented(f"x-amz-content-sha256: {payload}")
        self.trailers: dict[str, str] = {}

    def update(self, data: bytes) -> None:
        if self._md5 is not None:
            self._md5.update(data)
        for digest, _ in self._checksums.values():
            digest.update(data)
        if self._payload is not None:
            self._payload.update(data)

    def check(self) -> None:
        """Raises the S3 error of the first digest that does not match."""
        if self._md5 is not None and self._md5.digest() != self._md5_expected:
            raise bad_digest()
        if self._payload is not None and self._payload.hexdigest() != self._payload_expected:
            raise S3Error(
                "XAmzContentSHA256Mismatch",
                400,
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            )
        for field, (digest, header) in self._checksums.items():
            expected = header if header is not None else self.trailers.get(field)
            if expected is None:
                raise invalid_argument(f"{field} was announced but not sent")
            if base64.b64encode(digest.digest()).decode() != expected:
                raise S3Error(
                    "BadDigest",
                    400,
                    f"The {field.removeprefix('x-amz-checksum-').upper()} you specified did "
                    "not match the calculated checksum.",
                )


def _aws_chunked(headers: Mapping[str, str]) -> bool:
    encoding = headers.get("Content-Encoding", "")
    payload = headers.get("x-amz-content-sha256", "")
    return "aws-chunked" in encoding or payload.startswith("STREAMING-")


async def body_chunks(
    content: StreamReader, headers: Mapping[str, str], digests: BodyDigests, idle_s: float
) -> AsyncIterator[bytes]:
    """The bytes of a request's body (`content`, framing removed), fed to `digests` as
    they pass; RequestTimeout when the client sends nothing for `idle_s`."""
    stream = _Idle(content, idle_s)
    source = _framed(stream, digests) if _aws_chunked(headers) else _plain(stream)
    async for chunk in source:
        digests.update(chunk)
        yield chunk


def request_timeout() -> S3Error:
    return S3Error(
        "RequestTimeout",
        400,
        "Your socket connection to the server was not read from or written to within the "
        "timeout period. Idle connections will be closed.",
    )


class _Idle:
    """`content`'s reads, each bounded by `idle_s` (RequestTimeout past it)."""

    def __init__(self, content: StreamReader, idle_s: float) -> None:
        self._content = content
        self._idle_s = idle_s

    async def read(self, n: int) -> bytes:
        return await self._bounded(self._content.read(n))

    async def readline(self) -> bytes:
        return await self._bounded(self._content.readline())

    async def _bounded(self, receive: Awaitable[bytes]) -> bytes:
        try:
            async with asyncio.timeout(self._idle_s):
                return await receive
        except TimeoutError as exc:
            raise request_timeout() from exc


async def _plain(content: _Idle) -> AsyncIterator[bytes]:
    while chunk := await content.read(_READ_BYTES):
        yield chunk


def _incomplete() -> S3Error:
    return S3Error(
        "IncompleteBody",
        400,
        "You did not provide the number of bytes specified by the Content-Length HTTP header.",
    )


async def _framed(content: _Idle, digests: BodyDigests) -> AsyncIterator[bytes]:
    """`size[;chunk-signature=...]\\r\\n data \\r\\n` ... `0\\r\\n` trailers `\\r\\n`."""
    while True:
        line = await content.readline()
        if not line.endswith(b"\r\n"):
            raise _incomplete()
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise invalid_argument("malformed aws-chunked body") from None
        if size == 0:
            break
        left = size
        while left:
            piece = await content.read(min(left, _READ_BYTES))
            if not piece:
                raise _incomplete()
            left -= len(piece)
            yield piece
        if await content.readline() != b"\r\n":
            raise invalid_argument("malformed aws-chunked body")
    seen = 0
    while True:
        line = await content.readline()
        seen += len(line)
        if not line.strip() or seen > _MAX_TRAILER_BYTES:
            break
        name, _, value = line.decode("latin-1").partition(":")
        digests.trailers[name.strip().lower()] = value.strip()
