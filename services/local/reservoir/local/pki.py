"""Credentials for a secure cluster: a CA, a server certificate, and one token per role and
per worker, written into one directory (keys and tokens readable by the owner only).

`reservoir local up --secure` makes them in its state dir; `reservoir credentials create`
makes them for a real cluster (docker-compose, Kubernetes), with the host names its servers
are dialled by. Files:

- `ca.pem`: the CA every process trusts (RESERVOIR_TLS_CA);
- `server.pem`, `server-key.pem`: the certificate every server presents (RESERVOIR_TLS_CERT,
  RESERVOIR_TLS_KEY); also a client certificate, for mutual TLS;
- `tokens.sha256`: what servers accept, hashes only (RESERVOIR_AUTH_TOKENS_FILE);
- `admin.token`, `reader.token`, `writer.token`, `master.token` (a worker-role token with
  subject `master`), `gateway.token` (a writer-role token with subject `gateway`, for the S3
  gateway), and `<worker id>.token` per worker (RESERVOIR_TOKEN_FILE).

The CA's key is not kept: new host names or a rotation mean new credentials everywhere.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reservoir.common.serving.auth import new_token, token_hash

if TYPE_CHECKING:
    from cryptography import x509

# Names of the non-worker token files; a worker id may not take one.
RESERVED_NAMES = ("admin", "reader", "writer", "master", "gateway")
# A worker id becomes a file name and a field of the tokens file (no spaces, no slashes);
# Kubernetes node names fit.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


@dataclass(frozen=True)
class LocalCredentials:
    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def cert(self) -> Path:
        return self.directory / "server.pem"

    @property
    def key(self) -> Path:
        return self.directory / "server-key.pem"

    @property
    def tokens_file(self) -> Path:
        """What servers accept: hashes only."""
        return self.directory / "tokens.sha256"

    def token(self, name: str) -> Path:
        return self.directory / f"{name}.token"


def _write(path: Path, data: bytes, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def check_worker_ids(worker_ids: Iterable[str]) -> list[str]:
    """The worker ids, checked: usable as file names and token subjects, unique, and none
    of admin, reader, master."""
    ids = list(worker_ids)
    for worker_id in ids:
        if not _NAME.match(worker_id) or worker_id in RESERVED_NAMES:
            raise ValueError(
                f"not a usable worker id: {worker_id!r} (letters, digits, '.', '_', '-'; "
                f"not {', '.join(RESERVED_NAMES)})"
            )
    duplicates = sorted({w for w in ids if ids.count(w) > 1})
    if duplicates:
        raise ValueError(f"worker ids given twice: {', '.join(duplicates)}")
    return ids


def subject_alt_names(hosts: Iterable[str]) -> list[str]:
    """localhost, 127.0.0.1 and ::1 (for probes and port-forwards), then `hosts` in order,
    without repeats."""
    names: list[str] = []
    for host in ("localhost", "127.0.0.1", "::1", *hosts):
        host = host.strip()
        if host and host not in names:
            names.append(host)
    return names


def _general_name(host: str) -> x509.GeneralName:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _key_usage(x509: Any, signs_certificates: bool) -> Any:
    return x509.KeyUsage(
        digital_signature=not signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def create(
    directory: Path,
    worker_ids: Iterable[str],
    days: int = 30,
    hosts: Iterable[str] | None = None,
    label: str = "reservoir local",
) -> LocalCredentials:
    """A fresh CA and server certificate, and tokens: admin, reader, one for the master,
    one for the S3 gateway, one per worker. The certificate is valid for localhost, 127.0.0.1, ::1 and `hosts`
    (names or IP addresses); `hosts=None` (a local cluster) adds this machine's name.
    `label` names the CA (`<label> CA`) and the certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    worker_ids = check_worker_ids(worker_ids)
    if hosts is None:
        host = socket.gethostname()
        hosts = [host] if host else []
    names = [_general_name(h) for h in subject_alt_names(hosts)]
    directory.mkdir(parents=True, exist_ok=True)
    creds = LocalCredentials(directory)
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{label} CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(x509, signs_certificates=True), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, label)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(x509, signs_certificates=False), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write(creds.ca, ca_cert.public_bytes(pem), private=False)
    _write(creds.cert, cert.public_bytes(pem), private=False)
    _write(
        creds.key,
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        private=True,
    )
    lines = ["# role  sha256(token)  subject"]
    # The S3 gateway is a writer of its own (subject `gateway`): it writes for the S3 keys
    # whose role is writer and itself refuses every write of a reader's key (the cluster
    # sees one principal, the gateway, whoever signed). Its own subject keeps it apart from
    # the operators' tokens: it is given neither theirs nor an admin's.
    principals = [
        ("admin", "admin", ""),
        ("reader", "reader", ""),
        ("writer", "writer", ""),
        ("master", "worker", "master"),
        ("gateway", "writer", "gateway"),
    ]
    principals += [(w, "worker", w) for w in worker_ids]
    for name, role, subject in principals:
        token = new_token()
        _write(creds.token(name), token.encode() + b"\n", private=True)
        lines.append(f"{role} {token_hash(token)} {subject}".rstrip())
    _write(creds.tokens_file, ("\n".join(lines) + "\n").encode(), private=False)
    return creds
