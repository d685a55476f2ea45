"""The local cluster's S3 gateway: the keys a secure one checks signatures against, and
whether it answers yet."""

from __future__ import annotations

import os
import secrets
import ssl
import urllib.error
import urllib.request
from pathlib import Path

from .pki import LocalCredentials

GATEWAY = "gateway"
# The access keys written for a secure local cluster, one per role.
READER_KEY, WRITER_KEY = "reservoir-reader", "reservoir-writer"


def gateway_keys_file(state_dir: Path) -> Path:
    return Path(state_dir) / "gateway-keys"


def write_gateway_keys(state_dir: Path, replace: bool = False) -> Path:
    """`ACCESS_KEY SECRET ROLE` lines for a reader and a writer, with new random secrets
    (kept if the file exists, unless `replace`: a restarted gateway takes the keys its
    clients hold)."""
    path = gateway_keys_file(state_dir)
    if replace or not path.exists():
        lines = [f"{key} {secrets.token_urlsafe(30)} {role}" for key, role in ((READER_KEY, "reader"), (WRITER_KEY, "writer"))]  # fmt: skip
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("# ACCESS_KEY SECRET ROLE\n" + "\n".join(lines) + "\n")
    return path


def read_gateway_key(state_dir: Path, access_key: str) -> str:
    """The secret of one of the keys `write_gateway_keys` made."""
    for line in gateway_keys_file(state_dir).read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == access_key:
            return fields[1]
    raise KeyError(access_key)


def gateway_answers(url: str, credentials: LocalCredentials | None) -> bool:
    """Whether the gateway answers HTTP (an error answer too: unsigned requests to a
    secure one are refused)."""
    context = ssl.create_default_context(cafile=str(credentials.ca)) if credentials else None
    try:
        with urllib.request.urlopen(url + "/", timeout=1, context=context):
            return True
    except urllib.error.HTTPError:
        return True
