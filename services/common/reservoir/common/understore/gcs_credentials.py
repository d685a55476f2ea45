"""Google credentials for gs:// mounts (`--credentials`): `env` takes the service-account
JSON file named by GOOGLE_APPLICATION_CREDENTIALS in this process's environment,
`file:PATH` names one directly; `anonymous` sends no token (public buckets, emulators).

A service account signs its own short-lived tokens (self-signed JWTs, RS256), so no token
endpoint is contacted; a JSON file with `"disable_oauth": true` (an emulator's) sends
none. No other source is consulted: obstore's own chain would end at the instance
metadata service. Errors name the file and the variable, never a key.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reservoir.common.errors import InvalidArgument, PermissionDenied

_SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
_TOKEN_LIFETIME = timedelta(hours=1)


class GoogleToken:
    """Bearer tokens from a service-account JSON file (self-signed JWTs, renewed before
    they expire); none when anonymous. Also obstore's credential provider, so reads and
    the JSON API calls made here use the same tokens."""

    def __init__(self, source: str) -> None:
        self._account: dict[str, Any] | None = None
        self._token = ""
        self._expires = datetime(2000, 1, 1, tzinfo=UTC)  # long gone: the first call signs
        self._lock = threading.Lock()
        if source == "anonymous":
            return
        if source.startswith("file:"):
            path = source[len("file:") :]
        elif source in ("", "env"):
            path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
            if not path:
                raise PermissionDenied(
                    "no Google credentials in this process's environment (credential source "
                    "'env' needs GOOGLE_APPLICATION_CREDENTIALS, a service-account JSON file)"
                )
        else:
            raise InvalidArgument(
                f"unknown credential source {source!r} (env, anonymous or file:/path)"
            )
        self._account = _read_service_account(path)

    def __call__(self) -> dict[str, Any]:
        token = self.token()
        return {"token": token, "expires_at": self._expires if token else None}

    def token(self) -> str:
        account = self._account
        if account is None or account.get("disable_oauth"):
            return ""
        with self._lock:
            now = datetime.now(UTC)
            if now < self._expires - timedelta(minutes=5):
                return self._token
            self._token = _self_signed_jwt(account, now)
            self._expires = now + _TOKEN_LIFETIME
            return self._token


def _read_service_account(path: str) -> dict[str, Any]:
    try:
        account = json.loads(Path(path).read_text())
    except OSError as exc:
        raise PermissionDenied(f"cannot read credentials file {path}: {exc.strerror}") from exc
    except ValueError:
        raise InvalidArgument(f"credentials file {path} is not JSON") from None
    if not isinstance(account, dict):
        raise InvalidArgument(f"credentials file {path} is not a service-account JSON file")
    if account.get("disable_oauth"):
        return account
    if account.get("type") != "service_account":
        raise InvalidArgument(
            f"credentials file {path} is not a service-account key (type "
            f"{account.get('type')!r}; only 'service_account' files are taken)"
        )
    missing = [f for f in ("client_email", "private_key") if not account.get(f)]
    if missing:
        raise InvalidArgument(f"credentials file {path} lacks {' and '.join(missing)}")
    return account


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _self_signed_jwt(account: dict[str, Any], now: datetime) -> str:
    """A JWT the service account signs itself (RS256), which Google's APIs take as an
    OAuth token for the scope it names."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    header = {"alg": "RS256", "typ": "JWT"}
    if account.get("private_key_id"):
        header["kid"] = account["private_key_id"]
    issued = int(now.timestamp())
    claims = {
        "iss": account["client_email"],
        "sub": account["client_email"],
        "scope": _SCOPE,
        "iat": issued,
        "exp": issued + int(_TOKEN_LIFETIME.total_seconds()),
    }
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    try:
        key = serialization.load_pem_private_key(account["private_key"].encode(), password=None)
    except ValueError:
        raise InvalidArgument(
            f"the private key of service account {account['client_email']} cannot be read"
        ) from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise InvalidArgument(f"service account {account['client_email']}: not an RSA key")
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"
