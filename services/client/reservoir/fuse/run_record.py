"""The file a supervisor keeps about itself while it owns a mount point: how
`reservoir fuse --unmount` finds it, and where an operator sees which process serves the
mount, how often it was restarted and where a daemon logs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from reservoir.common.config import FuseConfig


def run_dir(config: FuseConfig) -> Path:
    if config.run_dir:
        return Path(config.run_dir)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "reservoir-fuse"
    return Path(tempfile.gettempdir()) / f"reservoir-fuse-{os.getuid()}"


def _key(mountpoint: str) -> str:
    name = Path(mountpoint).name or "root"
    return f"{name}-{hashlib.sha256(mountpoint.encode()).hexdigest()[:12]}"


def record_file(config: FuseConfig, mountpoint: str) -> Path:
    return run_dir(config) / f"{_key(mountpoint)}.json"


def log_file(config: FuseConfig, mountpoint: str) -> Path:
    return run_dir(config) / f"{_key(mountpoint)}.log"


def process_alive(pid: int) -> bool:
    """A process of ours with this pid runs (and is not a zombie nor a reused pid that
    is not a Reservoir process)."""
    if pid <= 0:
        return False
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return status.rsplit(")", 1)[-1].split()[0] != "Z" and b"reservoir" in cmdline


@dataclass
class SupervisorRecord:
    mountpoint: str
    path: str
    master: str
    supervisor_pid: int
    server_pid: int = 0
    state: str = "starting"  # starting, mounted, restarting, stopping
    restarts: int = 0
    started_at: str = ""
    log: str = ""

    def save(self, file: Path) -> None:
        file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = file.with_name(f".{file.name}.{os.getpid()}")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2))
        tmp.replace(file)

    @classmethod
    def load(cls, file: Path) -> SupervisorRecord | None:
        try:
            data = json.loads(file.read_text())
            return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})
        except (OSError, ValueError, TypeError):
            return None


def live_supervisor(config: FuseConfig, mountpoint: str) -> SupervisorRecord | None:
    """The record of the supervisor serving `mountpoint` now, if one does."""
    record = SupervisorRecord.load(record_file(config, mountpoint))
    if record is None or record.supervisor_pid == os.getpid():
        return None
    return record if process_alive(record.supervisor_pid) else None
