"""What a `--secure` local cluster's processes and clients present: the CA, certificate
and tokens made by `pki.create` (see pki.py), wired into settings and environment
variables. Every answer is "nothing" for an insecure cluster, so callers need no branch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reservoir.common.config import EtcdSettings, SecuritySettings

from .pki import LocalCredentials


class ClusterSecurity:
    """Read from the cluster's recorded settings (`secure`, `credentials`) on each use, so
    it never disagrees with them."""

    def __init__(self, state_dir: Path, settings: Mapping[str, Any]) -> None:
        self._state_dir = state_dir
        self._settings = settings

    @property
    def credentials(self) -> LocalCredentials | None:
        """The CA, certificate and tokens of a `--secure` cluster; None otherwise."""
        if not self._settings.get("secure"):
            return None
        return LocalCredentials(Path(self._settings.get("credentials") or self._state_dir / "tls"))

    def recorded_paths(self) -> dict[str, Any]:
        """Where a client finds the CA and each role's token (kept in cluster.json)."""
        creds = self.credentials
        if creds is None:
            return {}
        return {
            "tls_ca": str(creds.ca),
            "tokens": {role: str(creds.token(role)) for role in ("admin", "reader", "writer")}
            | {"worker": str(creds.token("worker1"))},
        }

    def client(self, role: str) -> SecuritySettings:
        """What a client of this cluster presents: its CA and a token of `role`."""
        creds = self.credentials
        if creds is None:
            return SecuritySettings()
        return SecuritySettings(tls_ca=str(creds.ca), token_file=str(creds.token(role)))

    def etcd(self) -> EtcdSettings:
        """TLS with the cluster's CA and a client certificate (the server certificate, which
        is also valid for client auth); plaintext otherwise."""
        creds = self.credentials
        if creds is None:
            return EtcdSettings()
        return EtcdSettings(ca=str(creds.ca), cert=str(creds.cert), key=str(creds.key))

    def server_env(self, token: str) -> dict[str, str]:
        """The environment of a server presenting the token named `token`."""
        creds = self.credentials
        if creds is None:
            return {}
        etcd = self.etcd()
        return {
            "RESERVOIR_TLS_CA": str(creds.ca),
            "RESERVOIR_TLS_CERT": str(creds.cert),
            "RESERVOIR_TLS_KEY": str(creds.key),
            "RESERVOIR_AUTH_TOKENS_FILE": str(creds.tokens_file),
            "RESERVOIR_TOKEN_FILE": str(creds.token(token)),
            "RESERVOIR_ETCD_CA": etcd.ca,
            "RESERVOIR_ETCD_CERT": etcd.cert,
            "RESERVOIR_ETCD_KEY": etcd.key,
        }
