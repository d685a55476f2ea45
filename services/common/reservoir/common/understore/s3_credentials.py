"""Where an S3 mount's credentials come from: the source a mount names (`env`, `anonymous`
or `file:PATH`, an AWS shared-credentials style file such as a mounted Kubernetes Secret),
resolved in the process that uses them, never stored."""

from __future__ import annotations

import configparser
from pathlib import Path
from typing import Any

from reservoir.common.errors import InvalidArgument, PermissionDenied
from reservoir.common.redaction import install as redact_sdk_logs


def _read_credentials_file(path: str) -> tuple[str, str, str | None]:
    """An AWS shared-credentials style file (a Kubernetes Secret mounted as a file)."""
    parser = configparser.ConfigParser()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PermissionDenied(f"cannot read credentials file {path}: {exc.strerror}") from exc
    if not text.lstrip().startswith("["):
        text = "[default]\n" + text
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        # The parser's message quotes the offending line: never echo a file's content.
        raise InvalidArgument(
            f"credentials file {path} is not an AWS credentials file ({type(exc).__name__})"
        ) from None
    if not parser.sections():
        raise InvalidArgument(f"credentials file {path} has no section")
    section = parser["default"] if parser.has_section("default") else parser[parser.sections()[0]]
    try:
        return (
            section["aws_access_key_id"],
            section["aws_secret_access_key"],
            section.get("aws_session_token"),
        )
    except KeyError as exc:
        raise InvalidArgument(f"credentials file {path} lacks {exc.args[0]}") from exc


def aws_session(source: str) -> tuple[Any, bool]:
    """The boto3 session holding the credentials a mount's credential source names (what
    its S3 clients, and its event queue's, sign with); True when requests go unsigned
    (anonymous)."""
    import boto3

    redact_sdk_logs()
    session_args: dict[str, Any] = {}
    if source.startswith("file:"):
        key, secret, token = _read_credentials_file(source[len("file:") :])
        session_args = {
            "aws_access_key_id": key,
            "aws_secret_access_key": secret,
            "aws_session_token": token,
        }
    elif source not in ("", "env", "anonymous"):
        raise InvalidArgument(
            f"unknown credential source {source!r} (env, anonymous or file:/path)"
        )
    return boto3.session.Session(**session_args), source == "anonymous"
