"""AWS Signature V4 as the gateway checks it, against requests signed by botocore itself
(the signer every AWS SDK for Python uses): the header form and the presigned form pass
with the right secret and fail with anything changed."""

from __future__ import annotations

import datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from requests.structures import CaseInsensitiveDict

from reservoir.gateway.s3_errors import S3Error
from reservoir.gateway.signatures import (
    AccessKey,
    SignatureCheck,
    SignedRequest,
    query_pairs,
    read_keys,
)

KEY = AccessKey("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "reader")
URL = "https://gw.example:9000/bucket/dir/x%20y%2Bz.bin?list-type=2&prefix=a%2Fb"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _signed_headers(url: str = URL, method: str = "GET") -> SignedRequest:
    request = AWSRequest(method=method, url=url, headers={"Range": "bytes=0-1"})
    S3SigV4Auth(Credentials(KEY.access_key, KEY.secret), "s3", "us-east-1").add_auth(request)
    return _as_received(request.url, method, dict(request.headers.items()))


def _presigned(url: str = URL, expires: int = 600) -> SignedRequest:
    request = AWSRequest(method="GET", url=url)
    S3SigV4QueryAuth(
        Credentials(KEY.access_key, KEY.secret), "s3", "us-east-1", expires=expires
    ).add_auth(request)
    return _as_received(request.url, "GET", {"Host": urlsplit(request.url).netloc})


def _as_received(url: str, method: str, headers: dict[str, str | bytes]) -> SignedRequest:
    parts = urlsplit(url)
    raw = parts.path + (f"?{parts.query}" if parts.query else "")
    received = CaseInsensitiveDict(
        {k: v.decode() if isinstance(v, bytes) else v for k, v in headers.items()}
    )
    received.setdefault("Host", parts.netloc)
    return SignedRequest(method, raw, query_pairs(parts.query), received)


CHECK = SignatureCheck({KEY.access_key: KEY}, clock_skew_s=900)


def _denied(request: SignedRequest, now: datetime.datetime | None = None) -> bool:
    try:
        CHECK.signer(request, now or _now())
    except S3Error as err:
        return (err.code, err.status, err.fields) == ("AccessDenied", 403, {})
    return False


def test_a_header_signature_of_a_known_key_names_its_signer() -> None:
    assert CHECK.signer(_signed_headers(), _now()) == KEY
    assert CHECK.signer(_signed_headers("https://gw.example/bucket"), _now()) == KEY


def test_a_presigned_url_of_a_known_key_names_its_signer() -> None:
    assert CHECK.signer(_presigned(), _now()) == KEY


def test_any_change_to_a_signed_request_is_denied() -> None:
    good = _signed_headers()

    def headers(**changed: str) -> CaseInsensitiveDict[str]:
        copy = CaseInsensitiveDict(dict(good.headers))
        copy.update(changed)
        return copy

    changes = [
        SignedRequest("HEAD", good.raw_path, good.query, good.headers),
        SignedRequest(
            good.method, good.raw_path.replace("x%20y", "x%20w"), good.query, good.headers
        ),
        SignedRequest(good.method, good.raw_path, [*good.query, ("max-keys", "1")], good.headers),
        SignedRequest(good.method, good.raw_path, good.query, headers(Range="bytes=0-9")),
        SignedRequest(good.method, good.raw_path, good.query, headers(Host="other:9000")),
    ]
    for changed in changes:
        assert _denied(changed)


def test_unknown_keys_wrong_secrets_and_unsigned_requests_are_denied() -> None:
    other = SignatureCheck(
        {KEY.access_key: AccessKey(KEY.access_key, "another secret", "reader")}, 900
    )
    with pytest.raises(S3Error):
        other.signer(_signed_headers(), _now())
    assert _denied(_signed_headers(), now=_now()) is False
    assert _denied_by(SignatureCheck({}, 900), _signed_headers())
    unsigned = _as_received(URL, "GET", {})
    assert _denied(unsigned)


def _denied_by(check: SignatureCheck, request: SignedRequest) -> bool:
    try:
        check.signer(request, _now())
    except S3Error as err:
        return err.code == "AccessDenied"
    return False


def _signed_at(request: SignedRequest) -> datetime.datetime:
    """When botocore signed `request` (its X-Amz-Date): a time taken once at import can be
    minutes older when the test runs late in a long session."""
    stamp = request.headers.get("X-Amz-Date") or dict(request.query)["X-Amz-Date"]
    return datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)


def test_stale_requests_and_expired_presigned_urls_are_denied() -> None:
    signed = _signed_headers()
    at = _signed_at(signed)
    assert _denied(signed, now=at + datetime.timedelta(minutes=16))
    assert not _denied(signed, now=at + datetime.timedelta(minutes=14))
    presigned = _presigned(expires=60)
    assert _denied(presigned, now=_signed_at(presigned) + datetime.timedelta(minutes=2))
    assert _denied(_presigned(expires=8 * 24 * 3600))


def test_a_keys_file_has_a_key_secret_and_role_per_line(tmp_path: Path) -> None:
    good = tmp_path / "keys"
    good.write_text("# comment\nAK1 secret1 reader\n\nAK2 secret2 writer  # trailing\n")
    keys = read_keys(str(good))
    assert keys == {
        "AK1": AccessKey("AK1", "secret1", "reader"),
        "AK2": AccessKey("AK2", "secret2", "writer"),
    }
    assert keys["AK2"].may_write and not keys["AK1"].may_write
    for bad in ("AK1 secret1\n", "AK1 secret1 admin\n"):
        good.write_text(bad)
        with pytest.raises(ValueError, match="line 1"):
            read_keys(str(good))
