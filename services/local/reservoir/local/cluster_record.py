"""What a local cluster says about itself: the record kept in `<state dir>/cluster.json`
(read back by `LocalCluster.load`, and by clients finding their master, CA and tokens)
and the report `reservoir local status` prints."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import probes
from .cluster_security import ClusterSecurity
from .gateway_keys import GATEWAY, gateway_keys_file
from .process import ClusterError
from .server_processes import is_master
from .state_dir import StateDir
from .worker_roster import is_worker

if TYPE_CHECKING:
    from .cluster import LocalCluster


def record(cluster: LocalCluster) -> dict[str, Any]:
    """The cluster.json of `cluster` as it is now."""
    return {
        "master": cluster.master_address,
        **ClusterSecurity(cluster.state_dir, cluster.settings).recorded_paths(),
        "s3_endpoint": cluster.s3_endpoint,
        "s3_managed": cluster.s3_managed,
        **gateway_fields(cluster),
        "metadata_url": cluster.metadata_url,
        "settings": cluster.settings,
        "processes": {k: asdict(p) for k, p in cluster.processes.items()},
    }


def read(state_dir: Path) -> dict[str, Any]:
    """The record of the cluster running in `state_dir`; a refusal saying what to run
    when none runs there."""
    state = StateDir(Path(state_dir))
    file = state.cluster_file
    if not file.exists():
        if state.stopped_file.exists():
            raise ClusterError(
                f"the local cluster in {state_dir} is stopped (`reservoir local up` starts "
                "a clean one, `reservoir local up --resume` starts it again)"
            )
        raise ClusterError(f"no local cluster in {state_dir} (run `reservoir local up`)")
    data: dict[str, Any] = json.loads(file.read_text())
    return data


def status(cluster: LocalCluster) -> dict[str, Any]:
    """Each process with its pid, port, log, liveness, metrics, (a master) its role and (a
    worker) its state as the master has it: serving, draining, drained, or "unregistered"."""
    running = any(p.alive() for p in cluster.processes.values())
    roles = cluster.master_roles() if running else {}
    states = (
        probes.worker_states(cluster.master_address, probes.reader_transport(cluster))
        if running
        else {}
    )
    return {
        "master": cluster.master_address,
        "s3_endpoint": cluster.s3_endpoint,
        "metadata_url": cluster.metadata_url,
        **gateway_fields(cluster),
        "processes": {
            name: {"pid": p.pid, "port": p.port, "alive": p.alive(), "log": p.log}
            | ({"metrics": cluster.metrics_url(name)} if p.metrics_port else {})
            | ({"role": roles.get(f"127.0.0.1:{p.port}", "unknown")} if is_master(name) else {})
            | ({"worker_state": states.get(name, "unregistered")} if is_worker(name) else {})
            for name, p in sorted(cluster.processes.items())
        },
    }


def gateway_fields(cluster: LocalCluster) -> dict[str, str]:
    """Where the gateway serves, and on a secure cluster the file of its access keys."""
    if GATEWAY not in cluster.processes:
        return {}
    keys = gateway_keys_file(cluster.state_dir)
    return {"gateway": cluster.gateway_url} | (
        {"gateway_keys": str(keys)} if cluster.credentials else {}
    )
