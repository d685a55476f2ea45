"""Credentials for a `--secure` local cluster: a CA, a server certificate, and one token
per role, written into the state dir (keys and tokens readable by the owner only)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from reservoir.common.auth import new_token, token_hash


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


def create(directory: Path, worker_ids: list[str], days: int = 30) -> LocalCredentials:
    """A fresh CA and server certificate (valid for 127.0.0.1, ::1, localhost and this
    host's name), and tokens: admin, reader, one per worker, one for the master."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    creds = LocalCredentials(directory)
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "reservoir local CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    host = socket.gethostname()
    if host and host != "localhost":
        names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "reservoir-local")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(until)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
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
    principals = [("admin", "admin", ""), ("reader", "reader", ""), ("master", "worker", "master")]
    principals += [(w, "worker", w) for w in worker_ids]
    for name, role, subject in principals:
        token = new_token()
        _write(creds.token(name), token.encode() + b"\n", private=True)
        lines.append(f"{role} {token_hash(token)} {subject}".rstrip())
    _write(creds.tokens_file, ("\n".join(lines) + "\n").encode(), private=False)
    return creds
