"""A cluster whose workers are on hosts that are hosts (host_network.py): etcd, the S3
server and the master in the root namespace on the bridge, one worker in each host's
network namespace at its own address, told its host id (RESERVOIR_HOST). For the tests of
what depends on where things run (test_hosts.py) and the benches that measure it
(bench/rank_locality_bench.py --netns)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from reservoir.local.cluster import DEV_CREDENTIALS, etcd_binary, free_port
from tests.eventually import eventually
from tests.integration.host_network import HostNetwork

WORKER_PORT = 7000  # each host has its own ports: the same on all of them
METRICS_PORT = 7001


class Processes:
    """Processes of one cluster, each in a session of its own, killed by `stop_all`."""

    def __init__(self, logs: Path) -> None:
        self._logs = logs
        self._running: list[subprocess.Popen[bytes]] = []
        # Only what this cluster sets: nothing of the caller's own RESERVOIR_* settings.
        self._base = {k: v for k, v in os.environ.items() if not k.startswith("RESERVOIR_")}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        with open(self._logs / f"{name}.log", "ab") as log:
            self._running.append(
                subprocess.Popen(
                    argv,
                    env={**self._base, **DEV_CREDENTIALS, "PYTHONUNBUFFERED": "1", **env},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )

    def stop_all(self) -> None:
        # Killed, not stopped: nothing of this cluster outlives its user, so nothing needs
        # a clean shutdown (a worker cut off from its master would wait on it).
        for popen in self._running:
            if popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGKILL)
        for popen in self._running:
            popen.wait(timeout=30)


def shm_root(net: HostNetwork) -> Path:
    """Where the workers keep block files (one directory each): tmpfs, as in production."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path("/tmp")
    return base / f"reservoir-hosts-{net.tag}"


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as answer:
        return bool(answer.status == 200)


def start_hosts_cluster(
    net: HostNetwork,
    processes: Processes,
    state: Path,
    zones: dict[str, str],
    capacity: str = "256MiB",
) -> tuple[str, str]:
    """etcd, S3 and the master on the bridge, and a worker `w-HOST` on each host of
    `zones` (host -> zone); returns the master's and the S3 server's addresses."""
    here = net.root_address
    etcd_port, peer_port, s3_port, master_port = (free_port() for _ in range(4))
    processes.start(
        "etcd",
        [
            etcd_binary(),
            "--name",
            "hosts",
            "--data-dir",
            str(state / "etcd"),
            "--listen-client-urls",
            f"http://{here}:{etcd_port}",
            "--advertise-client-urls",
            f"http://{here}:{etcd_port}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer_port}",
            "--initial-cluster",
            f"hosts=http://127.0.0.1:{peer_port}",
            "--log-level",
            "warn",
        ],
        {},
    )
    s3 = f"http://{here}:{s3_port}"
    argv = [
        sys.executable,
        "-m",
        "reservoir.local.s3server",
        "--host",
        here,
        "--port",
        str(s3_port),
    ]
    processes.start("s3", argv, {})
    eventually(lambda: _http_ok(f"http://{here}:{etcd_port}/health"), what="etcd serving")
    eventually(lambda: _http_ok(f"{s3}/_reservoir/stats"), what="S3 serving")
    metadata = f"etcd://{here}:{etcd_port}"
    master = f"{here}:{master_port}"
    processes.start(
        "master",
        [sys.executable, "-m", "reservoir.master.server"],
        {
            "RESERVOIR_METADATA_URL": metadata,
            "RESERVOIR_MASTER_LISTEN": master,
            "RESERVOIR_METRICS_LISTEN": f"127.0.0.1:{free_port()}",
        },
    )
    for name, zone in zones.items():
        host = net.hosts[name]
        processes.start(
            f"worker-{name}",
            host.command([sys.executable, "-m", "reservoir.worker.server"]),
            {
                "RESERVOIR_METADATA_URL": metadata,
                "RESERVOIR_MASTER": master,
                "RESERVOIR_WORKER_LISTEN": f"{host.address}:{WORKER_PORT}",
                "RESERVOIR_METRICS_LISTEN": f"{host.address}:{METRICS_PORT}",
                "RESERVOIR_WORKER_ID": f"w-{name}",
                "RESERVOIR_HOST": name,
                "RESERVOIR_ZONE": zone,
                "RESERVOIR_WORKER_SHM_DIR": str(shm_root(net) / name),
                "RESERVOIR_WORKER_CAPACITY": capacity,
                "RESERVOIR_WORKER_LEASE_TTL": "3",
            },
        )
    return master, s3
