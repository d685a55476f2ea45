"""Growing and shrinking a running local cluster: `local add-worker` and `local
remove-worker`. Each change is recorded in the cluster's roster (worker_roster.py), so
`local up --resume` starts the workers the cluster had when it stopped, each with its own
options, and none that was removed.

A removed worker's cache goes with it (its disk tier and shared-memory files are deleted):
a later worker of the same name starts empty and is filled from its peers like any other.
Keeping the cache is what `--drain` is for: the master copies the worker's blocks to their
next homes before the worker stops.
"""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING

from reservoir.common import tmpfs_mount

from .process import ClusterError
from .worker_roster import WorkerOptions, next_worker, with_worker, worker_number

if TYPE_CHECKING:
    from reservoir.client.load_jobs import LoadJob

    from .cluster import LocalCluster

# How often a drain's progress is asked for while waiting for it.
_DRAIN_POLL_S = 0.25


def add_worker(cluster: LocalCluster, options: WorkerOptions) -> str:
    """Starts the next worker (one past the highest number) with `options` over the
    cluster's, returns its name once it serves; recorded for `local up --resume`. A worker
    that does not come up is stopped and left out of the record."""
    name = next_worker(cluster.worker_names())
    _check_token(cluster, name)
    _discard_cache(cluster, name)
    with_worker(cluster.settings, name, options)
    try:
        cluster.start_worker(worker_number(name))
    except BaseException:
        if name in cluster.processes:
            cluster.stop(name)
        _forget(cluster, name)
        raise
    return name


def remove_worker(
    cluster: LocalCluster, name: str, *, drain: bool, drain_timeout_s: float | None
) -> None:
    """Stops worker `name` and takes it out of the record; with `drain`, first drains it
    through the master (its blocks copied to their next homes), waiting up to
    `drain_timeout_s` (None: until the drain ends). A drain that fails or is not done in
    time leaves the worker running (draining) and raises ClusterError saying so."""
    workers = cluster.worker_names()
    if name not in workers:
        raise ClusterError(
            f"no worker {name!r} in the local cluster of {cluster.state_dir} "
            f"(its workers: {', '.join(workers) or 'none'})"
        )
    if len(workers) == 1:
        raise ClusterError(
            f"{name} is the cluster's last worker: without one nothing can be cached or read "
            "through the cluster (`reservoir local add-worker` first, or `reservoir local "
            "down` to stop the whole cluster)"
        )
    if drain:
        _drain(cluster, name, drain_timeout_s)
    cluster.stop(name)
    _forget(cluster, name)


def _drain(cluster: LocalCluster, name: str, timeout_s: float | None) -> None:
    from reservoir.client import Client

    with Client(config=cluster.client_config()) as client:
        job = client.drain(name)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not job.finished:
            if deadline is not None and time.monotonic() >= deadline:
                raise ClusterError(
                    f"the drain of {name} is not done after {timeout_s:g}s "
                    f"({job.done_blocks}/{job.total_blocks} blocks copied), so {name} was "
                    f"not stopped: it still runs and the drain goes on (`reservoir job show "
                    f"{job.id}`); run this again to wait longer, or `reservoir undrain {name}` "
                    "to put it back in service"
                )
            time.sleep(_DRAIN_POLL_S)
            job = client.job(job.id)
    if not job.succeeded:
        raise ClusterError(
            f"the drain of {name} {job.state}{_errors(job)}, so {name} was not stopped: it "
            f"still runs; `reservoir undrain {name}` puts it back in service, or remove it "
            "without --drain (its cached blocks are then lost)"
        )


def _errors(job: LoadJob) -> str:
    return f" ({'; '.join(job.errors[:3])})" if job.errors else ""


def _check_token(cluster: LocalCluster, name: str) -> None:
    """On a secure cluster a worker presents a token of its own, which the servers must
    have read at start: only the tokens made with the cluster can be given."""
    creds = cluster.credentials
    if creds is not None and not creds.token(name).exists():
        raise ClusterError(
            f"cannot add {name}: this secure cluster has no token for it in "
            f"{creds.directory} (its servers read their tokens file at start; `reservoir "
            "local up --secure` makes tokens for a few more workers than it starts)"
        )


def _forget(cluster: LocalCluster, name: str) -> None:
    with_worker(cluster.settings, name, None)
    cluster.forget(name)
    _discard_cache(cluster, name)


def _discard_cache(cluster: LocalCluster, name: str) -> None:
    shutil.rmtree(cluster.disk_dir(name), ignore_errors=True)
    tmpfs_mount.remove_tree(cluster.shm_root / name)
