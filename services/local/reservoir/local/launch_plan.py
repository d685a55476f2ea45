"""What `reservoir local up` starts, decided before anything starts: the settings (given
ones checked against a stopped cluster's recorded ones when resuming, see
cluster_settings.py), and what a resumed cluster keeps (every process's ports, its managed
S3's objects, its credentials) or a clean one wipes (see state_dir.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import cluster_settings, pki
from .etcd_members import member_names
from .process import Process
from .state_dir import StateDir, ensure_ports_free
from .worker_roster import ROSTER, roster, worker_number

# A secure cluster's servers read its tokens file once, at start: tokens for this many
# more workers than `--workers` are made with it, so `local add-worker` has some to give.
SPARE_WORKER_TOKENS = 8

if TYPE_CHECKING:
    from .cluster import LocalCluster


@dataclass(frozen=True)
class LaunchPlan:
    state: StateDir
    settings: dict[str, Any]
    recorded_etcd: list[Process]  # a resumed etcd cluster's members ([]: new ones)
    # A resumed cluster's processes as they ran: each starts again on its ports ({}: new).
    recorded: dict[str, Process]
    s3_endpoint: str  # an S3 not managed by the cluster ("": start the managed one)
    s3_port: int  # the managed S3's port (0: a free one)
    keep_s3_data: bool
    make_credentials: bool  # a secure cluster's own CA and tokens are to be made

    @classmethod
    def prepare(
        cls,
        state_dir: Path,
        requested: Mapping[str, Any],
        *,
        s3_endpoint: str,
        keep_s3_data: bool,
        resume: bool,
    ) -> LaunchPlan:
        """Refuses what cannot start (a running cluster there, settings that differ from
        the stopped cluster's, nothing to resume) before the state directory changes;
        then wipes a stopped cluster's data unless resuming it."""
        state = StateDir(Path(state_dir))
        state.path.mkdir(parents=True, exist_ok=True)
        state.ensure_not_running()
        settings = cluster_settings.resolve(
            requested, state.resumable().settings if resume else None
        )
        member_names(settings["etcd_members"])  # refused before the stopped cluster is wiped
        recorded = state.resumable().processes if resume else {}
        recorded_etcd = state.resumable().etcd if resume else []
        s3_port = 0  # the resumed managed S3 keeps its port: the mounts name it
        if resume:
            ensure_ports_free(recorded)
            s3 = state.resumable_s3(s3_endpoint)
            s3_port = s3.managed_port
            s3_endpoint = "" if s3_port else s3.endpoint
            keep_s3_data = keep_s3_data or bool(s3_port)
        else:
            state.wipe()
            for disk in state.path.glob("worker*/disk"):  # the previous cluster's blocks
                shutil.rmtree(disk, ignore_errors=True)
        # A new cluster's roster is worker1…workerN; a resumed one's is as it was recorded.
        settings[ROSTER] = {name: o.record() for name, o in roster(settings).items()}
        own = state.path / "tls"
        settings["credentials"] = settings["credentials"] or str(own)
        kept = resume and (own / "ca.pem").exists()  # its clients hold that CA and tokens
        return cls(
            state=state,
            settings=settings,
            recorded_etcd=recorded_etcd,
            recorded=recorded,
            s3_endpoint=s3_endpoint,
            s3_port=s3_port,
            keep_s3_data=keep_s3_data,
            make_credentials=bool(settings["secure"])
            and Path(settings["credentials"]) == own
            and not kept,
        )

    def start(self, cluster: LocalCluster) -> None:
        """Starts `cluster` as planned, in dependency order (etcd, S3, masters, workers,
        gateway); on any failure stops what started, so no process is left behind."""
        settings = self.settings
        cluster.recorded = dict(self.recorded)
        try:
            if self.make_credentials:
                pki.create(
                    Path(settings["credentials"]),
                    [f"worker{n}" for n in range(1, settings["workers"] + SPARE_WORKER_TOKENS + 1)],
                )
            # etcd and S3 need nothing of each other; the masters need etcd; the workers,
            # a master to register with.
            first = cluster.etcd_processes(*settings["etcd_flags"], recorded=self.recorded_etcd)
            if self.s3_endpoint:
                cluster.s3_endpoint = self.s3_endpoint
            else:
                first.append(
                    cluster.s3_process(
                        settings["s3_latency_ms"], port=self.s3_port, keep_data=self.keep_s3_data
                    )
                )
            cluster.start_together(first)
            for n in range(1, settings["masters"] + 1):
                cluster.start_master(n)
            cluster.start_workers([worker_number(name) for name in roster(settings)])
            if settings["gateway"]:
                cluster.start_gateway()
        except BaseException:
            cluster.down()
            raise
