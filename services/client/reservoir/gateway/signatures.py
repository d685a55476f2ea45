"""AWS Signature Version 4 as S3 checks it, in both forms: the `Authorization` header
and the presigned URL (`X-Amz-Signature` in the query). The keys are the gateway's own
(a keys file: `ACCESS_KEY SECRET ROLE` a line); a request that is unsigned, signed with
an unknown key, signed wrongly or out of date is refused with AccessDenied and nothing
more, so a prober learns nothing of which part failed."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote

from reservoir.common import logs

from .s3_errors import access_denied

log = logs.get_logger(__name__)

ALGORITHM = "AWS4-HMAC-SHA256"
ROLES = ("reader", "writer")
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
_MAX_PRESIGNED_S = 7 * 24 * 3600  # S3's longest X-Amz-Expires
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=([^,\s]+)\s*,\s*SignedHeaders=([^,\s]+)\s*,\s*Signature=([0-9a-f]{64})$"
)


@dataclass(frozen=True)
class AccessKey:
    access_key: str
    secret: str
    role: str  # reader: reads; writer: reads and writes

    @property
    def may_write(self) -> bool:
        return self.role == "writer"


def read_keys(path: str) -> dict[str, AccessKey]:
    """The keys file: `ACCESS_KEY SECRET ROLE` per line, `#` comments, blank lines."""
    keys: dict[str, AccessKey] = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 3 or fields[2] not in ROLES:
            raise ValueError(
                f"{path} line {number}: expected `ACCESS_KEY SECRET ROLE` with ROLE one of "
                f"{', '.join(ROLES)}"
            )
        keys[fields[0]] = AccessKey(*fields)
    return keys


@dataclass(frozen=True)
class SignedRequest:
    """What a signature covers, as the server received it."""

    method: str
    raw_path: str  # percent-encoded, as sent
    query: list[tuple[str, str]]  # decoded, in order
    headers: Mapping[str, str]  # case-insensitive lookup


def _uri_encode(text: str, safe: str) -> str:
    return quote(text, safe=safe + "-_.~")


def _canonical_uri(raw_path: str) -> str:
    # S3 signs the path encoded once; clients differ in what they leave unencoded, so the
    # received path is decoded and encoded again the canonical way.
    return _uri_encode(unquote(raw_path.split("?", 1)[0]), "/") or "/"


def _canonical_query(query: list[tuple[str, str]]) -> str:
    pairs = sorted((_uri_encode(k, ""), _uri_encode(v, "")) for k, v in query)
    return "&".join(f"{k}={v}" for k, v in pairs)


def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = hmac.new(f"AWS4{secret}".encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def signature(
    secret: str,
    request: SignedRequest,
    signed_headers: list[str],
    amz_date: str,
    scope: str,
    payload_hash: str,
) -> str:
    """The signature of `request` with `secret` (what a client computes, and the gateway
    computes again)."""
    headers = "".join(
        f"{name}:{' '.join(request.headers.get(name, '').split())}\n" for name in signed_headers
    )
    canonical = "\n".join(
        (
            request.method,
            _canonical_uri(request.raw_path),
            _canonical_query(request.query),
            headers,
            ";".join(signed_headers),
            payload_hash,
        )
    )
    to_sign = "\n".join(
        (ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest())
    )
    date, region, service, _ = scope.split("/")
    key = _signing_key(secret, date, region, service)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def _parse_time(amz_date: str) -> datetime:
    return datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


class SignatureCheck:
    """Who signed a request, or AccessDenied."""

    def __init__(self, keys: dict[str, AccessKey], clock_skew_s: float) -> None:
        self._keys = keys
        self._skew = timedelta(seconds=clock_skew_s)

    def signer(self, request: SignedRequest, now: datetime | None = None) -> AccessKey:
        now = now or datetime.now(UTC)
        try:
            return self._check(request, now)
        except (ValueError, KeyError, IndexError) as exc:
            # Why, for the operator's log only: the client is told AccessDenied.
            log.info("gateway_signature_refused", reason=str(exc) or type(exc).__name__)
            raise access_denied() from None

    def _check(self, request: SignedRequest, now: datetime) -> AccessKey:
        query = dict(request.query)
        if "X-Amz-Signature" in query:
            return self._presigned(request, query, now)
        match = _AUTHORIZATION.match(request.headers.get("Authorization", "").strip())
        if not match:
            raise ValueError("no AWS4-HMAC-SHA256 Authorization header or presigned query")
        credential, signed, given = match.groups()
        amz_date = request.headers.get("x-amz-date", "")
        if abs(now - _parse_time(amz_date)) > self._skew:
            raise ValueError("request time too skewed")
        payload = request.headers.get("x-amz-content-sha256", "")
        if not payload:
            raise ValueError("no x-amz-content-sha256")
        return self._verify(request, credential, signed, given, amz_date, payload, request.query)

    def _presigned(self, request: SignedRequest, query: dict[str, str], now: datetime) -> AccessKey:
        if query.get("X-Amz-Algorithm") != ALGORITHM:
            raise ValueError("presigned with another algorithm")
        amz_date = query["X-Amz-Date"]
        expires = int(query["X-Amz-Expires"])
        if not 0 < expires <= _MAX_PRESIGNED_S:
            raise ValueError("X-Amz-Expires out of range")
        signed_at = _parse_time(amz_date)
        if now > signed_at + timedelta(seconds=expires) or signed_at - now > self._skew:
            raise ValueError("presigned URL expired or not yet valid")
        unsigned = [(k, v) for k, v in request.query if k != "X-Amz-Signature"]
        return self._verify(
            request,
            query["X-Amz-Credential"],
            query["X-Amz-SignedHeaders"],
            query["X-Amz-Signature"],
            amz_date,
            UNSIGNED_PAYLOAD,
            unsigned,
        )

    def _verify(
        self,
        request: SignedRequest,
        credential: str,
        signed: str,
        given: str,
        amz_date: str,
        payload: str,
        query: list[tuple[str, str]],
    ) -> AccessKey:
        access_key, date, region, service, terminal = credential.split("/")
        if service != "s3" or terminal != "aws4_request" or date != amz_date[:8]:
            raise ValueError("bad credential scope")
        key = self._keys[access_key]
        signed_headers = signed.split(";")
        if "host" not in signed_headers:
            raise ValueError("host is not signed")
        scoped = SignedRequest(request.method, request.raw_path, query, request.headers)
        expected = signature(
            key.secret,
            scoped,
            signed_headers,
            amz_date,
            "/".join(credential.split("/")[1:]),
            payload,
        )
        if not hmac.compare_digest(expected, given):
            raise ValueError("signature does not match")
        return key


def query_pairs(raw_query: str) -> list[tuple[str, str]]:
    """The query string's pairs as sent, decoded (`a` without `=` is `a=`)."""
    return parse_qsl(raw_query, keep_blank_values=True)
