"""How each server of a local cluster is run: its command, ports and environment (the
same variables as the docker-compose file), and the naming of its processes.

Only descriptions are made here; LocalCluster starts them and waits for them to serve.
A server started again keeps its ports (clients and Prometheus still point at them).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .cluster_security import ClusterSecurity
from .etcd_members import is_member
from .gateway_keys import GATEWAY, write_gateway_keys
from .process import Process, free_port
from .state_dir import StateDir
from .worker_roster import options_of

if TYPE_CHECKING:
    from .cluster import LocalCluster

DEV_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "reservoir-dev",
    "AWS_SECRET_ACCESS_KEY": "reservoir-dev-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def s3_process(cluster: LocalCluster, latency_ms: float, port: int, keep_data: bool) -> Process:
    """The managed S3 server; with `keep_data` its objects outlive it (in the state
    directory's s3-data, written when it is stopped)."""
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
        argv += ["--data-dir", str(StateDir(cluster.state_dir).s3_data)]
    return Process(name="s3", argv=argv, env={}, port=port, log=str(cluster.state_dir / "s3.log"))


def gateway_process(cluster: LocalCluster) -> Process:
    """`reservoir gateway`, reading through the cluster with the gateway's token (a writer
    of its own); on a secure cluster it serves HTTPS with the servers' certificate and
    checks signatures of the keys in `<state dir>/gateway-keys` (made here)."""
    existing = cluster.previous(GATEWAY)
    port = existing.port if existing else free_port()
    metrics = metrics_port(existing)
    env = {
        **server_env(cluster),
        **_security(cluster).server_env(GATEWAY),
        "RESERVOIR_MASTER": cluster.master_address,
        "RESERVOIR_GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "RESERVOIR_METRICS_LISTEN": f"127.0.0.1:{metrics}",
    }
    if cluster.credentials is not None:
        env["RESERVOIR_GATEWAY_KEYS_FILE"] = str(write_gateway_keys(cluster.state_dir))
    return Process(
        name=GATEWAY,
        argv=[sys.executable, "-m", "reservoir.gateway"],
        env=env,
        port=port,
        log=str(cluster.state_dir / "gateway.log"),
        metrics_port=metrics,
    )


def master_process(cluster: LocalCluster, n: int) -> Process:
    """Master `n` (processes "master", "master2", ...)."""
    name = "master" if n == 1 else f"master{n}"
    existing = cluster.previous(name)
    port = existing.port if existing else free_port()
    metrics = metrics_port(existing)
    return Process(
        name=name,
        argv=[sys.executable, "-m", "reservoir.master.server"],
        env={
            **server_env(cluster),
            **_security(cluster).server_env("master"),
            "RESERVOIR_MASTER_LISTEN": f"127.0.0.1:{port}",
            "RESERVOIR_METRICS_LISTEN": f"127.0.0.1:{metrics}",
        },
        port=port,
        log=str(cluster.state_dir / f"{name}.log"),
        metrics_port=metrics,
    )


def worker_process(cluster: LocalCluster, n: int) -> Process:
    """Worker `n`, with its own capacity, shm and disk tier options (`local add-worker`)
    over the cluster's, and the cluster's lease."""
    name = f"worker{n}"
    existing = cluster.previous(name)
    port = existing.port if existing else free_port()
    metrics = metrics_port(existing)
    settings = cluster.settings
    options = options_of(settings, name)
    env = {
        # `local down` stops every worker at once: none drains unless asked to (the `env`
        # setting, or `local remove-worker --drain`, which drains before it stops one).
        "RESERVOIR_WORKER_DRAIN_TIMEOUT": "0",
        **server_env(cluster),
        **_security(cluster).server_env(name),
        "RESERVOIR_WORKER_LISTEN": f"127.0.0.1:{port}",
        "RESERVOIR_METRICS_LISTEN": f"127.0.0.1:{metrics}",
        "RESERVOIR_WORKER_ID": name,
        "RESERVOIR_MASTER": cluster.master_address,
        "RESERVOIR_WORKER_CAPACITY": str(options.capacity),
        "RESERVOIR_WORKER_LEASE_TTL": str(settings.get("lease_ttl", 10)),
    }
    if options.shm:
        env["RESERVOIR_WORKER_SHM_DIR"] = str(cluster.shm_root / name)
    if options.host:
        env["RESERVOIR_HOST"] = options.host
    if options.disk_capacity:
        env["RESERVOIR_WORKER_DISK_DIRS"] = str(cluster.disk_dir(name))
        env["RESERVOIR_WORKER_DISK_CAPACITY"] = str(options.disk_capacity)
    return Process(
        name=name,
        argv=[sys.executable, "-m", "reservoir.worker.server"],
        env=env,
        port=port,
        log=str(cluster.state_dir / f"{name}.log"),
        metrics_port=metrics,
    )


def _security(cluster: LocalCluster) -> ClusterSecurity:
    return ClusterSecurity(cluster.state_dir, cluster.settings)


def server_env(cluster: LocalCluster) -> dict[str, str]:
    """What every server of the cluster shares: its etcd, JSON logs, the managed S3's
    credentials, and the `env` setting last (it overrides)."""
    env = {
        "RESERVOIR_METADATA_URL": cluster.metadata_url,
        "RESERVOIR_LOG_FORMAT": "json",
        "PYTHONUNBUFFERED": "1",
    }
    if cluster.s3_managed:
        env.update(DEV_CREDENTIALS)
    env.update({k: str(v) for k, v in cluster.settings.get("env", {}).items()})
    return env


def metrics_port(existing: Process | None) -> int:
    """A restarted server keeps its metrics port (Prometheus keeps scraping it)."""
    return existing.metrics_port if existing and existing.metrics_port else free_port()


def stop_order(name: str) -> tuple[int, str]:
    # Workers first (they leave the ring cleanly), then the masters, then the stores.
    if is_master(name):
        return (1, name)
    return (3 if is_member(name) else {"s3": 2}.get(name, 0), name)


def is_master(name: str) -> bool:
    return name == "master" or (name.startswith("master") and name[6:].isdigit())


def master_number(name: str) -> int:
    return int(name[6:] or 1)
