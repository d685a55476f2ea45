"""Credentials for a real cluster: `credentials create`, `token new`, `token hash`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .output import emit
from .subcommands import Subcommands


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def cmd_credentials_create(args: argparse.Namespace) -> None:
    from reservoir.local import pki
    from reservoir.local.gateway_keys import write_gateway_keys
    from reservoir.local.pki import LocalCredentials

    try:
        import cryptography  # noqa: F401
    except ImportError as exc:  # the client-only install
        raise ValueError(
            "`reservoir credentials create` needs the cryptography package "
            "(pip install cryptography, or the `local` extra)"
        ) from exc
    directory = Path(args.dir)
    workers = pki.check_worker_ids(_names(args.workers))
    if not workers:
        raise ValueError("--workers names no worker")
    existing = LocalCredentials(directory)
    if not args.force and (existing.ca.exists() or existing.tokens_file.exists()):
        raise ValueError(
            f"{directory} already holds credentials (--force replaces them: every process "
            "then needs the new ones)"
        )
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    hosts = _names(args.hosts or "")
    creds = pki.create(directory, workers, days=args.days, hosts=hosts, label="reservoir")
    gateway_keys = write_gateway_keys(directory, replace=True)
    files = {
        "ca": str(creds.ca),
        "cert": str(creds.cert),
        "key": str(creds.key),
        "tokens_file": str(creds.tokens_file),
        "tokens": {name: str(creds.token(name)) for name in (*pki.RESERVED_NAMES, *workers)},
        "gateway_keys": str(gateway_keys),
        "hosts": pki.subject_alt_names(hosts),
        "days": args.days,
    }
    # Paths only: a token is printed by nothing but `reservoir token new`.
    emit(
        args,
        files,
        lambda: "\n".join(
            [
                f"CA                  {creds.ca}",
                f"server certificate  {creds.cert}  (valid for {', '.join(files['hosts'])};"
                f" {args.days} days)",
                f"server key          {creds.key}",
                f"tokens file         {creds.tokens_file}  (servers: RESERVOIR_AUTH_TOKENS_FILE)",
                *(f"{name + ' token':19} {path}" for name, path in files["tokens"].items()),
                f"S3 gateway keys     {gateway_keys}  (RESERVOIR_GATEWAY_KEYS_FILE)",
            ]
        ),
    )


def _read_token_from_stdin() -> str:
    token = sys.stdin.readline().strip()
    if not token:
        raise ValueError("expected a token on standard input")
    return token


def cmd_token_hash(args: argparse.Namespace) -> None:
    from reservoir.common.serving.auth import token_hash

    print(token_hash(_read_token_from_stdin()))


def cmd_token_new(args: argparse.Namespace) -> None:
    from reservoir.common.serving.auth import new_token, token_hash
    from reservoir.local import pki

    subject = args.subject or ""
    if args.role == "worker" and not subject:
        raise ValueError("a worker token names its worker: --subject WORKER_ID")
    if args.role == "worker":
        pki.check_worker_ids([subject])
    elif any(c.isspace() or c == "#" for c in subject):
        raise ValueError(f"a subject has no spaces and no '#': \"{subject}\"")
    token = new_token()
    # The line for the servers' tokens file goes to stderr, the token alone to stdout:
    # `reservoir token new --role reader > reader.token 2>> tokens.sha256`.
    print(f"{args.role} {token_hash(token)} {subject}".rstrip(), file=sys.stderr)
    print(token)


def register(commands: Subcommands) -> None:
    from reservoir.common.serving.auth import ROLES

    credentials = commands.group("credentials", "TLS certificates and tokens for a real cluster")
    p = credentials.add(
        "create",
        "write a CA, a server certificate and key, one token per role and per worker, "
        "and the servers' tokens file (hashes) into DIR",
        cmd_credentials_create,
    )
    p.add_argument("dir", metavar="DIR", help="where the files go (made 0700)")
    p.add_argument(
        "--workers",
        required=True,
        help="comma-separated worker ids (RESERVOIR_WORKER_ID; on Kubernetes the node names)",
    )
    p.add_argument(
        "--hosts",
        help="comma-separated host names and IP addresses the servers are dialled by "
        "(the certificate is always valid for localhost, 127.0.0.1 and ::1 too)",
    )
    p.add_argument(
        "--days", type=int, default=365, help="validity of the CA and certificate (default 365)"
    )
    p.add_argument("--force", action="store_true", help="replace credentials already in DIR")

    token = commands.group("token", "make or hash a single token")
    p = token.add(
        "new", "print a new token on stdout and its tokens-file line on stderr", cmd_token_new
    )
    p.add_argument("--role", required=True, choices=list(ROLES), help="what the token may do")
    p.add_argument("--subject", help="the worker id of a worker token; a label otherwise")
    token.add("hash", "read a token on stdin, print its SHA-256", cmd_token_hash)
