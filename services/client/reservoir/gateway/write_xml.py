"""The XML of S3's write operations: the request bodies the gateway reads
(CompleteMultipartUpload, DeleteObjects) and the answers it writes, element for element
as S3 writes them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from .multipart import SpooledPart, Upload
from .s3_errors import S3Error
from .xml_replies import NAMESPACE, iso_time

_HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'
MAX_DELETE_KEYS = 1000  # S3's limit on one DeleteObjects request


def _element(name: str, value: object) -> str:
    return f"<{name}>{escape(str(value))}</{name}>"


def malformed() -> S3Error:
    return S3Error(
        "MalformedXML",
        400,
        "The XML you provided was not well-formed or did not validate against our published schema",
    )


def _parse(body: bytes) -> ElementTree.Element:
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        raise malformed() from None
    for element in root.iter():  # S3's namespace is optional in requests: names without it
        element.tag = element.tag.rpartition("}")[2]
    return root


def _text(element: ElementTree.Element, name: str) -> str | None:
    child = element.find(name)
    return None if child is None else (child.text or "")


def completed_parts(body: bytes) -> list[tuple[int, str]]:
    """CompleteMultipartUpload's (PartNumber, ETag) pairs, in the order given."""
    root = _parse(body)
    if root.tag != "CompleteMultipartUpload":
        raise malformed()
    parts = []
    for part in root.findall("Part"):
        number, etag = _text(part, "PartNumber"), _text(part, "ETag")
        if number is None or etag is None or not number.strip().isdigit():
            raise malformed()
        parts.append((int(number), etag.strip()))
    return parts


@dataclass(frozen=True)
class DeleteRequest:
    keys: list[str]
    quiet: bool


def delete_request(body: bytes) -> DeleteRequest:
    root = _parse(body)
    if root.tag != "Delete":
        raise malformed()
    keys = []
    for entry in root.findall("Object"):
        key = _text(entry, "Key")
        if not key:
            raise malformed()
        keys.append(key)
    if not keys or len(keys) > MAX_DELETE_KEYS:
        raise malformed()
    return DeleteRequest(keys, (_text(root, "Quiet") or "").strip().lower() == "true")


def delete_result(deleted: Iterable[str], errors: Iterable[tuple[str, S3Error]]) -> bytes:
    done = "".join(f"<Deleted>{_element('Key', key)}</Deleted>" for key in deleted)
    failed = "".join(
        f"<Error>{_element('Key', key)}{_element('Code', err.code)}"
        f"{_element('Message', err.message)}</Error>"
        for key, err in errors
    )
    return f'{_HEAD}<DeleteResult xmlns="{NAMESPACE}">{done}{failed}</DeleteResult>'.encode()


def copy_result(etag: str, modified_ms: int) -> bytes:
    return (
        f'{_HEAD}<CopyObjectResult xmlns="{NAMESPACE}">'
        f"{_element('LastModified', iso_time(modified_ms))}{_element('ETag', etag)}"
        "</CopyObjectResult>"
    ).encode()


def copy_part_result(etag: str, modified_ms: int) -> bytes:
    return (
        f'{_HEAD}<CopyPartResult xmlns="{NAMESPACE}">'
        f"{_element('LastModified', iso_time(modified_ms))}{_element('ETag', etag)}"
        "</CopyPartResult>"
    ).encode()


def initiated(upload: Upload) -> bytes:
    return (
        f'{_HEAD}<InitiateMultipartUploadResult xmlns="{NAMESPACE}">'
        f"{_element('Bucket', upload.bucket)}{_element('Key', upload.key)}"
        f"{_element('UploadId', upload.upload_id)}</InitiateMultipartUploadResult>"
    ).encode()


def completed(location: str, bucket: str, key: str, etag: str) -> bytes:
    return (
        f'{_HEAD}<CompleteMultipartUploadResult xmlns="{NAMESPACE}">'
        f"{_element('Location', location)}{_element('Bucket', bucket)}{_element('Key', key)}"
        f"{_element('ETag', etag)}</CompleteMultipartUploadResult>"
    ).encode()


def part_listing(
    upload: Upload, parts: list[SpooledPart], marker: int, max_parts: int, truncated: bool
) -> bytes:
    owner = f"{_element('ID', 'reservoir')}{_element('DisplayName', 'reservoir')}"
    listed = "".join(
        f"<Part>{_element('PartNumber', p.number)}{_element('LastModified', iso_time(p.modified_ms))}"
        f"{_element('ETag', chr(34) + p.etag + chr(34))}{_element('Size', p.size)}</Part>"
        for p in parts
    )
    following = parts[-1].number if parts else marker
    return (
        f'{_HEAD}<ListPartsResult xmlns="{NAMESPACE}">'
        f"{_element('Bucket', upload.bucket)}{_element('Key', upload.key)}"
        f"{_element('UploadId', upload.upload_id)}"
        f"<Initiator>{owner}</Initiator><Owner>{owner}</Owner>"
        f"{_element('StorageClass', 'STANDARD')}{_element('PartNumberMarker', marker)}"
        f"{_element('NextPartNumberMarker', following)}{_element('MaxParts', max_parts)}"
        f"{_element('IsTruncated', 'true' if truncated else 'false')}{listed}</ListPartsResult>"
    ).encode()


def upload_listing(
    bucket: str,
    asked: UploadListingAsk,
    uploads: list[Upload],
    prefixes: list[str],
    truncated: bool,
) -> bytes:
    """ListMultipartUploadsResult; keys and prefixes URL-encoded when asked to."""
    owner = f"{_element('ID', 'reservoir')}{_element('DisplayName', 'reservoir')}"

    def key(value: str) -> str:
        return quote(value, safe="/") if asked.encoding == "url" else value

    listed = "".join(
        f"<Upload>{_element('Key', key(u.key))}{_element('UploadId', u.upload_id)}"
        f"<Initiator>{owner}</Initiator><Owner>{owner}</Owner>"
        f"{_element('StorageClass', 'STANDARD')}{_element('Initiated', iso_time(u.initiated_ms))}"
        "</Upload>"
        for u in uploads
    )
    common = "".join(
        f"<CommonPrefixes>{_element('Prefix', key(p))}</CommonPrefixes>" for p in prefixes
    )
    following = (
        f"{_element('NextKeyMarker', key(uploads[-1].key))}"
        f"{_element('NextUploadIdMarker', uploads[-1].upload_id)}"
        if truncated and uploads
        else ""
    )
    return (
        f'{_HEAD}<ListMultipartUploadsResult xmlns="{NAMESPACE}">'
        f"{_element('Bucket', bucket)}{_element('KeyMarker', key(asked.key_marker))}"
        f"{_element('UploadIdMarker', asked.upload_id_marker)}{following}"
        f"{_element('Prefix', key(asked.prefix))}"
        + (_element("Delimiter", asked.delimiter) if asked.delimiter else "")
        + (_element("EncodingType", asked.encoding) if asked.encoding else "")
        + f"{_element('MaxUploads', asked.max_uploads)}"
        f"{_element('IsTruncated', 'true' if truncated else 'false')}{listed}{common}"
        "</ListMultipartUploadsResult>"
    ).encode()


@dataclass(frozen=True)
class UploadListingAsk:
    """What a ListMultipartUploads asks for (its query)."""

    prefix: str = ""
    delimiter: str = ""
    key_marker: str = ""
    upload_id_marker: str = ""
    max_uploads: int = 1000
    encoding: str = ""
