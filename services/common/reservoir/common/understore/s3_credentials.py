"""Where an S3 mount's credentials come from: the source a mount names (`env`, `anonymous`
or `file:PATH`, an AWS shared-credentials style file such as a mounted Kubernetes Secret),
resolved in the process that uses them, never stored."""

from __future__ import annotations

import configparser
import functools
import os
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
    import botocore.session

    sdk = botocore.session.Session()
    sdk.register_component("data_loader", _shared_model_loader())
    return boto3.session.Session(botocore_session=sdk, **session_args), source == "anonymous"


class _SearchPaths(list[str]):
    """A data loader's search paths, to which each boto3 session appends its own directory
    once: the shared loader's list does not grow by one per session."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


@functools.cache
def _shared_model_loader() -> Any:
    """One botocore data loader for every session of this process. Each session otherwise
    parses the S3 model, its endpoint rules and the endpoint list again (~60-110 ms of CPU
    per store opened, and a mount opens one in the master and in every worker); the loader
    caches what it parsed, which botocore treats as read-only, as it does when one session
    makes many clients."""
    import botocore.loaders

    extra = os.environ.get("AWS_DATA_PATH", "")  # botocore's own setting, honoured as it does
    paths = _SearchPaths(
        os.path.expanduser(os.path.expandvars(p)) for p in extra.split(os.pathsep) if p
    )
    return botocore.loaders.Loader(extra_search_paths=paths)
