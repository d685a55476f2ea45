"""The XML bodies of S3's answers, element for element as S3 writes them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from urllib.parse import quote
from xml.sax.saxutils import escape

from reservoir.common.models import Inode

from .key_walk import Item
from .object_headers import quoted_etag
from .s3_errors import S3Error

NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
_HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'


def iso_time(ms: int) -> str:
    """S3's listing timestamps: ISO 8601 with milliseconds, UTC."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _element(name: str, value: object) -> str:
    return f"<{name}>{escape(str(value))}</{name}>"


def error(err: S3Error, resource: str, request_id: str) -> bytes:
    fields = "".join(_element(k, v) for k, v in err.fields.items())
    return (
        f"{_HEAD}<Error>{_element('Code', err.code)}{_element('Message', err.message)}"
        f"{fields}{_element('Resource', resource)}{_element('RequestId', request_id)}</Error>"
    ).encode()


def buckets(names: Iterable[tuple[str, int]]) -> bytes:
    listed = "".join(
        f"<Bucket>{_element('Name', name)}{_element('CreationDate', iso_time(ms))}</Bucket>"
        for name, ms in names
    )
    owner = f"<Owner>{_element('ID', 'reservoir')}{_element('DisplayName', 'reservoir')}</Owner>"
    return (
        f'{_HEAD}<ListAllMyBucketsResult xmlns="{NAMESPACE}">{owner}'
        f"<Buckets>{listed}</Buckets></ListAllMyBucketsResult>"
    ).encode()


def location(region: str) -> bytes:
    # us-east-1 is S3's empty LocationConstraint.
    value = "" if region == "us-east-1" else escape(region)
    return f'{_HEAD}<LocationConstraint xmlns="{NAMESPACE}">{value}</LocationConstraint>'.encode()


def _content(item: Item, inode: Inode, encode: bool) -> str:
    return (
        f"<Contents>{_element('Key', _encoded(item.key, encode))}"
        f"{_element('LastModified', iso_time(inode.mtime_ms))}"
        f"{_element('ETag', quoted_etag(inode))}{_element('Size', inode.size)}"
        f"{_element('StorageClass', 'STANDARD')}</Contents>"
    )


def _encoded(value: str, encode: bool) -> str:
    # encoding-type=url: what XML 1.0 cannot carry (control characters) survives.
    return quote(value, safe="/") if encode else value


def bucket_listing(
    bucket: str,
    params: dict[str, str | int | bool],
    items: list[Item],
    encode: bool,
    encoded_params: tuple[str, ...],
) -> bytes:
    """A ListBucketResult (v1 or v2): `params` in order (Prefix, Delimiter, MaxKeys, ...),
    those named in `encoded_params` URL-encoded when `encode`."""
    head = [_element("Name", bucket)]
    for name, value in params.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, str) and name in encoded_params:
            value = _encoded(value, encode)
        head.append(_element(name, value))
    contents = [_content(i, i.inode, encode) for i in items if i.inode is not None]
    prefixes = [
        f"<CommonPrefixes>{_element('Prefix', _encoded(i.key, encode))}</CommonPrefixes>"
        for i in items
        if i.inode is None
    ]
    if encode:
        head.append(_element("EncodingType", "url"))
    return (
        f'{_HEAD}<ListBucketResult xmlns="{NAMESPACE}">{"".join(head)}'
        f"{''.join(contents)}{''.join(prefixes)}</ListBucketResult>"
    ).encode()
