"""ListObjectsV2 and ListObjects (v1): their parameters checked as S3 checks them, one
page taken from the key walk, and the continuation token that resumes after it."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from .key_walk import Item, KeyWalk
from .s3_errors import invalid_argument
from .xml_replies import bucket_listing

MAX_KEYS = 1000  # S3 returns at most this many keys and common prefixes a page


def _max_keys(query: Mapping[str, str]) -> int:
    raw = query.get("max-keys", str(MAX_KEYS))
    try:
        value = int(raw)
    except ValueError:
        raise invalid_argument(
            "Provided max-keys not an integer or within integer range", "max-keys", raw
        ) from None
    if value < 0:
        raise invalid_argument(
            "Argument maxKeys must be an integer between 0 and 2147483647", "maxKeys", raw
        )
    return min(value, MAX_KEYS)


def _encoding(query: Mapping[str, str]) -> bool:
    kind = query.get("encoding-type")
    if kind is None:
        return False
    if kind.lower() != "url":
        raise invalid_argument(
            "Invalid Encoding Method specified in Request", "encoding-type", kind
        )
    return True


def _token(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode()


def _key_of_token(token: str) -> str:
    try:
        key = base64.urlsafe_b64decode(token.encode("ascii")).decode()
    except (ValueError, UnicodeError, binascii.Error):
        key = ""
    if not key:
        raise invalid_argument(
            "The continuation token provided is incorrect", "continuation-token", token
        )
    return key


async def _page(
    walk: KeyWalk, prefix: str, delimiter: str, after: str, limit: int
) -> tuple[list[Item], bool]:
    """Up to `limit` items after `after`, and whether more follow (one more is looked at)."""
    items: list[Item] = []
    if limit == 0:
        return items, False
    async for item in walk.items(prefix, delimiter, after):
        if len(items) == limit:
            return items, True
        items.append(item)
    return items, False


async def list_objects_v2(walk: KeyWalk, bucket: str, query: Mapping[str, str]) -> bytes:
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter", "")
    limit = _max_keys(query)
    encode = _encoding(query)
    start_after = query.get("start-after", "")
    token = query.get("continuation-token")
    after = _key_of_token(token) if token is not None else start_after
    items, truncated = await _page(walk, prefix, delimiter, after, limit)
    params: dict[str, str | int | bool] = {"Prefix": prefix}
    if delimiter:
        params["Delimiter"] = delimiter
    params |= {"MaxKeys": limit, "KeyCount": len(items), "IsTruncated": truncated}
    if token is not None:
        params["ContinuationToken"] = token
    if truncated:
        params["NextContinuationToken"] = _token(items[-1].key)
    if start_after and token is None:  # a continued listing goes on from its token alone
        params["StartAfter"] = start_after
    return bucket_listing(bucket, params, items, encode, ("Prefix", "Delimiter", "StartAfter"))


async def list_objects_v1(walk: KeyWalk, bucket: str, query: Mapping[str, str]) -> bytes:
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter", "")
    limit = _max_keys(query)
    encode = _encoding(query)
    marker = query.get("marker", "")
    items, truncated = await _page(walk, prefix, delimiter, marker, limit)
    params: dict[str, str | int | bool] = {"Prefix": prefix, "Marker": marker}
    # S3 sends NextMarker only with a delimiter; without one the last key is the marker.
    if truncated and delimiter:
        params["NextMarker"] = items[-1].key
    params["MaxKeys"] = limit
    if delimiter:
        params["Delimiter"] = delimiter
    params["IsTruncated"] = truncated
    return bucket_listing(
        bucket, params, items, encode, ("Prefix", "Marker", "NextMarker", "Delimiter")
    )
