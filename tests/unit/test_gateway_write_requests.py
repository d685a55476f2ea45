"""What the S3 gateway makes of a write request before the write path sees it: an
`aws-chunked` body unframed and its checksum trailer checked, Content-MD5 checked, the XML
of CompleteMultipartUpload and DeleteObjects read, and a completion's parts checked as S3
checks them; spooled parts bounded and freed."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.base_protocol import BaseProtocol
from aiohttp.streams import StreamReader

from reservoir.gateway import write_xml
from reservoir.gateway.multipart import MIN_PART_BYTES, MultipartUploads
from reservoir.gateway.request_body import BodyDigests, body_chunks
from reservoir.gateway.s3_errors import S3Error


def _crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def _read(raw: bytes, headers: dict[str, str]) -> tuple[bytes, S3Error | None]:
    async def run() -> tuple[bytes, S3Error | None]:
        stream = StreamReader(BaseProtocol(asyncio.get_running_loop()), 1 << 16)
        stream.feed_data(raw)
        stream.feed_eof()
        digests = BodyDigests(headers, signatures_checked=False)
        body = b"".join([chunk async for chunk in body_chunks(stream, headers, digests, 5.0)])
        try:
            digests.check()
        except S3Error as err:
            return body, err
        return body, None

    return asyncio.run(run())


def _aws_chunked(data: bytes, trailer: str) -> bytes:
    framed = b"".join(
        b"%x\r\n%s\r\n" % (len(data[i : i + 7]), data[i : i + 7]) for i in range(0, len(data), 7)
    )
    return framed + b"0\r\n" + f"x-amz-checksum-crc32:{trailer}\r\n\r\n".encode()


STREAMING = {
    "Content-Encoding": "aws-chunked",
    "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    "x-amz-trailer": "x-amz-checksum-crc32",
}


@pytest.mark.parametrize("headers", [{}, STREAMING], ids=["plain", "aws-chunked"])
def test_a_body_that_stops_arriving_is_a_request_timeout_not_a_wait_for_ever(
    headers: dict[str, str],
) -> None:
    """A client that sends part of a body and then nothing (S3 answers RequestTimeout
    after ~20 s of silence): the gateway stops waiting after its idle bound."""

    async def run() -> tuple[bytes, S3Error]:
        protocol = BaseProtocol(asyncio.get_running_loop())
        protocol.connection_made(asyncio.Transport())  # a client still connected
        stream = StreamReader(protocol, 1 << 16)
        stream.feed_data(b"7\r\nsome by\r\n" if headers else b"some by")  # and no EOF
        received = b""
        with pytest.raises(S3Error) as caught:
            digests = BodyDigests(headers, signatures_checked=False)
            async for chunk in body_chunks(stream, headers, digests, 0.2):
                received += chunk
        return received, caught.value

    received, error = asyncio.run(run())
    assert received == b"some by"
    assert (error.code, error.status) == ("RequestTimeout", 400)


def test_an_aws_chunked_body_is_unframed_and_its_crc32_trailer_checked() -> None:
    data = b"checkpoint bytes, framed by boto3 over https"
    body, error = _read(_aws_chunked(data, _crc32(data)), STREAMING)
    assert (body, error) == (data, None)
    body, error = _read(_aws_chunked(data, _crc32(b"other")), STREAMING)
    assert body == data
    assert error is not None and (error.code, error.status) == ("BadDigest", 400)


def test_a_content_md5_that_does_not_match_the_body_is_bad_digest() -> None:
    data = b"plain body"
    right = base64.b64encode(hashlib.md5(data).digest()).decode()
    assert _read(data, {"Content-MD5": right}) == (data, None)
    _, error = _read(data + b"!", {"Content-MD5": right})
    assert error is not None and error.code == "BadDigest"
    with pytest.raises(S3Error) as exc:
        BodyDigests({"Content-MD5": "not base64!"}, signatures_checked=False)
    assert exc.value.code == "InvalidDigest"


def test_a_payload_sha256_the_body_does_not_match_is_refused() -> None:
    data = b"signed payload"
    headers = {"x-amz-content-sha256": hashlib.sha256(b"something else").hexdigest()}
    _, error = _read(data, headers)
    assert error is not None and error.code == "XAmzContentSHA256Mismatch"


def test_chunk_signed_payloads_are_refused_when_signatures_are_checked() -> None:
    headers = {"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"}
    with pytest.raises(S3Error) as exc:
        BodyDigests(headers, signatures_checked=True)
    assert exc.value.code == "NotImplemented"


def test_complete_and_delete_xml_are_read_with_or_without_s3s_namespace() -> None:
    complete = (
        b'<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        b'<Part><ETag>"a"</ETag><PartNumber>1</PartNumber></Part>'
        b"<Part><PartNumber>3</PartNumber><ETag>b</ETag></Part></CompleteMultipartUpload>"
    )
    assert write_xml.completed_parts(complete) == [(1, '"a"'), (3, "b")]
    delete = b"<Delete><Quiet>true</Quiet><Object><Key>a b</Key></Object></Delete>"
    assert write_xml.delete_request(delete) == write_xml.DeleteRequest(["a b"], True)
    for bad in (b"<Delete>", b"<Delete></Delete>", b"<Other/>"):
        with pytest.raises(S3Error) as exc:
            write_xml.delete_request(bad)
        assert exc.value.code == "MalformedXML"


async def _chunks(*pieces: bytes) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def test_a_completion_is_checked_as_s3_checks_it_and_abort_frees_the_spool(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        uploads = MultipartUploads(str(tmp_path), 2 * MIN_PART_BYTES, 3600)
        upload = uploads.create("t", "k", "/t/k")
        small = await uploads.put_part(upload, 1, _chunks(b"x" * 10), 10, lambda: None)
        last = await uploads.put_part(upload, 2, _chunks(b"tail"), None, lambda: None)
        assert small.etag == hashlib.md5(b"x" * 10).hexdigest()

        def code(listed: list[tuple[int, str]]) -> str:
            with pytest.raises(S3Error) as exc:
                uploads.chosen(upload, listed)
            return exc.value.code

        assert code([(2, last.etag), (1, small.etag)]) == "InvalidPartOrder"
        assert code([(1, "wrong"), (2, last.etag)]) == "InvalidPart"
        assert code([(1, small.etag), (2, last.etag)]) == "EntityTooSmall"
        assert uploads.chosen(upload, [(2, f'"{last.etag}"')]) == [last]
        # More than the spool holds: refused (503) before a byte is written.
        with pytest.raises(S3Error) as exc:
            await uploads.put_part(upload, 3, _chunks(b""), 2 * MIN_PART_BYTES, lambda: None)
        assert exc.value.status == 503
        uploads.discard(upload)
        with pytest.raises(S3Error) as exc:
            uploads.get(upload.upload_id, "t", "k")
        assert exc.value.code == "NoSuchUpload"

    asyncio.run(run())
    assert list(tmp_path.glob("*/*")) == []  # the upload's directory is gone
