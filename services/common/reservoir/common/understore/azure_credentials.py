"""Azure credentials for az:// and abfs:// mounts (`--credentials`): `env` takes
AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY from this process's environment;
`file:PATH` reads a file of `account_name=NAME` and `account_key=KEY` lines (blank lines
and `#` comments ignored: a Kubernetes Secret mounted as a file); `anonymous` signs
nothing (public containers). No other source is consulted: obstore's own chain would end
at managed identity, a request to the instance metadata service.

The shared key signs the REST calls made here (Azure's SharedKey scheme, HMAC-SHA256 of
the canonical request) and is handed to obstore for its own. Errors name the file and the
variables, never the key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from email.utils import formatdate
from pathlib import Path
from urllib.parse import parse_qsl

from reservoir.common.errors import InvalidArgument, PermissionDenied

_API_VERSION = "2021-08-06"


class AccountKey:
    """Signs requests with an account's shared key (Azure's SharedKey scheme)."""

    def __init__(self, account: str, key: str) -> None:
        self.account = account
        try:
            self._key = base64.b64decode(key, validate=True)
        except ValueError:
            # Never the key itself in the message.
            raise InvalidArgument(
                f"the account key of storage account {account!r} is not base64"
            ) from None
        self.key = key

    def sign(self, method: str, path: str, headers: dict[str, str]) -> None:
        headers["x-ms-date"] = formatdate(usegmt=True)
        headers["x-ms-version"] = _API_VERSION
        lower = {k.lower(): v for k, v in headers.items()}
        length = lower.get("content-length", "")
        standard = [
            method,
            lower.get("content-encoding", ""),
            lower.get("content-language", ""),
            "" if length == "0" else length,
            lower.get("content-md5", ""),
            lower.get("content-type", ""),
            "",  # Date: x-ms-date stands in for it
            lower.get("if-modified-since", ""),
            lower.get("if-match", ""),
            lower.get("if-none-match", ""),
            lower.get("if-unmodified-since", ""),
            lower.get("range", ""),
        ]
        ms_headers = "".join(
            f"{name}:{value.strip()}\n"
            for name, value in sorted(lower.items())
            if name.startswith("x-ms-")
        )
        url_path, _, query = path.partition("?")
        resource = f"/{self.account}{url_path}"
        params: dict[str, list[str]] = {}
        for name, value in parse_qsl(query, keep_blank_values=True):
            params.setdefault(name.lower(), []).append(value)
        resource += "".join(f"\n{name}:{','.join(sorted(params[name]))}" for name in sorted(params))
        text = "\n".join(standard) + "\n" + ms_headers + resource
        digest = hmac.new(self._key, text.encode(), hashlib.sha256).digest()
        headers["Authorization"] = f"SharedKey {self.account}:{base64.b64encode(digest).decode()}"


def read_account_file(path: str) -> tuple[str, str]:
    """`account_name=` and `account_key=` lines; the account name and key."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PermissionDenied(f"cannot read credentials file {path}: {exc.strerror}") from exc
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep:
            # Never echo the line: it may be the key.
            raise InvalidArgument(
                f"credentials file {path}: every line is account_name=... or account_key=..."
            )
        values[name.strip().lower()] = value.strip()
    missing = [n for n in ("account_name", "account_key") if not values.get(n)]
    if missing:
        raise InvalidArgument(f"credentials file {path} lacks {' and '.join(missing)}")
    return values["account_name"], values["account_key"]


def account_key_of(source: str) -> AccountKey | None:
    """The account key a credential source names; None for anonymous."""
    if source == "anonymous":
        return None
    if source.startswith("file:"):
        return AccountKey(*read_account_file(source[len("file:") :]))
    if source in ("", "env"):
        name = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME", "")
        key = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY", "")
        if not name or not key:
            raise PermissionDenied(
                "no Azure credentials in this process's environment (credential source "
                "'env' needs AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY)"
            )
        return AccountKey(name, key)
    raise InvalidArgument(f"unknown credential source {source!r} (env, anonymous or file:/path)")
