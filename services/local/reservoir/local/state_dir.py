"""What a local cluster leaves in its state directory, and what `local up` does with it.

- `cluster.json`: the running cluster (ports, pids, settings); the CLI finds the master
  here. `local down` renames it `stopped.json`.
- `etcd-data/`: etcd's data — mounts, namespace, jobs (one directory per member, etcd1…,
  when etcd runs as a cluster: `local up --etcd-members 3`).
- `s3-data/`: the managed S3 server's objects, written when it stops (see s3server).

`local up` on a stopped cluster's directory starts a clean cluster: the old etcd and S3
data are wiped, so no mount can point at the previous run's S3. `local up --resume`
keeps them, and only when the S3 the mounts point at can be had again: the managed one
(its data kept) restarted on its old port, or an external endpoint that still answers.
A resumed cluster keeps every port it had (an exported RESERVOIR_MASTER, an aws profile
naming the S3 or the gateway, a Prometheus scraping the metrics ports go on working), so
it is refused while another process holds one of them, naming that process.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .port_holders import holder
from .process import ClusterError, Process, port_is_free

CLEAN = "run `reservoir local up` without --resume for a clean cluster (on new ports)"


@dataclass(frozen=True)
class StoppedCluster:
    """The parts of a stopped cluster that decide whether it can be resumed."""

    s3_endpoint: str
    s3_managed: bool
    s3_port: int
    settings: dict[str, Any]  # what it was started with (see cluster_settings)
    etcd: list[Process]  # its etcd members as they ran (names, ports, data)
    processes: dict[str, Process]  # every process as it ran: a resumed one keeps its ports


@dataclass(frozen=True)
class ResumedS3:
    endpoint: str
    managed_port: int  # 0: an external endpoint


class StateDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @property
    def cluster_file(self) -> Path:
        return self.path / "cluster.json"

    @property
    def stopped_file(self) -> Path:
        return self.path / "stopped.json"

    @property
    def etcd_data(self) -> Path:
        return self.path / "etcd-data"

    @property
    def s3_data(self) -> Path:
        return self.path / "s3-data"

    def _read(self, file: Path) -> dict[str, Any] | None:
        if not file.exists():
            return None
        try:
            data: dict[str, Any] = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            raise ClusterError(f"{file} is unreadable ({exc}); remove it to start over") from exc
        return data

    def ensure_not_running(self) -> None:
        data = self._read(self.cluster_file)
        if data is None:
            return
        processes = [Process(**p) for p in data.get("processes", {}).values()]
        alive = sorted(p.name for p in processes if p.alive())
        if alive:
            raise ClusterError(
                f"a local cluster is already running in {self.path} (master {data['master']}; "
                f"running: {', '.join(alive)}): use it, or `reservoir local down` first"
            )

    def stopped(self) -> StoppedCluster | None:
        """The cluster that last ran here and is not running (stopped or crashed)."""
        data = self._read(self.cluster_file) or self._read(self.stopped_file)
        if data is None:
            return None
        processes = data.get("processes", {})
        s3 = processes.get("s3")
        # Recorded since settings were resumable; before that, the processes tell.
        workers = sum(1 for name in processes if name.startswith("worker"))
        return StoppedCluster(
            s3_endpoint=data["s3_endpoint"],
            s3_managed=bool(data["s3_managed"]),
            s3_port=int(s3["port"]) if s3 else 0,
            settings={"workers": workers, **data.get("settings", {})},
            etcd=[Process(**p) for name, p in processes.items() if name.startswith("etcd")],
            processes={name: Process(**p) for name, p in processes.items()},
        )

    def mark_stopped(self) -> None:
        if self.cluster_file.exists():
            self.cluster_file.replace(self.stopped_file)

    def wipe(self) -> None:
        """Forgets the previous cluster: its metadata and its managed S3's objects."""
        for directory in (self.etcd_data, self.s3_data):
            shutil.rmtree(directory, ignore_errors=True)
        for file in (self.cluster_file, self.stopped_file):
            file.unlink(missing_ok=True)

    def resumable(self) -> StoppedCluster:
        """The stopped cluster `local up --resume` would start again, or a clear refusal."""
        previous = self.stopped()
        if previous is None or not self.etcd_data.exists():
            raise ClusterError(f"no stopped local cluster to resume in {self.path}")
        return previous

    def resumable_s3(self, s3_endpoint: str) -> ResumedS3:
        """The S3 to resume the stopped cluster with, or a clear refusal."""
        previous = self.resumable()
        if s3_endpoint and s3_endpoint != previous.s3_endpoint:
            raise ClusterError(
                f"cannot resume with S3 {s3_endpoint}: the stopped cluster's mounts point at "
                f"{previous.s3_endpoint}"
            )
        clean = CLEAN
        if previous.s3_managed:
            if not (self.s3_data / "manifest.json").exists():
                raise ClusterError(
                    f"cannot resume: the stopped cluster's S3 data is gone ({self.s3_data}); "
                    + clean
                )
            return ResumedS3(previous.s3_endpoint, previous.s3_port)
        if not _answers(previous.s3_endpoint):
            raise ClusterError(
                f"cannot resume: the stopped cluster's S3 {previous.s3_endpoint} is "
                "unreachable; start it again, or " + clean
            )
        return ResumedS3(previous.s3_endpoint, 0)


def ensure_ports_free(processes: dict[str, Process]) -> None:
    """Refuses to resume while another process holds a port the stopped cluster's
    processes had, naming each such port, whose it was, and who holds it now."""
    busy: list[str] = []
    for name, proc in sorted(processes.items()):
        for port, what in (
            (proc.port, name),
            (proc.metrics_port, f"{name} metrics"),
            (proc.peer_port, f"{name} peers"),
        ):
            if port and not port_is_free(port):
                who = holder(port)
                busy.append(f"port {port} ({what}) is held by {who or 'another process'}")
    if busy:
        raise ClusterError(
            "cannot resume on the stopped cluster's ports: "
            + "; ".join(busy)
            + " (its clients, mounts and exported addresses name those ports): stop that, "
            "or " + CLEAN
        )


def _answers(endpoint: str) -> bool:
    """Whether an HTTP server answers there (any status: S3 refuses anonymous calls)."""
    try:
        urllib.request.urlopen(endpoint, timeout=3).close()
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return True
