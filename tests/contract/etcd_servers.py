"""Real etcd servers for the contract tests: plaintext, or TLS with client certificate
authentication (the way `reservoir local up --secure` runs it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reservoir.common.config import EtcdSettings
from reservoir.local.cluster import LocalCluster


@dataclass(frozen=True)
class EtcdServer:
    """A running etcd: the URL to open a store on and the settings that reach it."""

    url: str
    settings: EtcdSettings
    cluster: LocalCluster


def start_etcd(
    state_dir: Path, credentials: Path | None, *flags: str, members: int = 1
) -> EtcdServer:
    """etcd alone in `state_dir` (`members` of one etcd cluster, the URL naming them all);
    with `credentials` (made by pki.create), TLS with --client-cert-auth."""
    settings: dict[str, object] = {"etcd_members": members}
    if credentials:
        settings |= {"secure": True, "credentials": str(credentials)}
    cluster = LocalCluster(state_dir=state_dir, settings=settings)
    cluster.start_etcd(*flags)
    return EtcdServer(cluster.metadata_url, cluster.etcd_settings(), cluster)
