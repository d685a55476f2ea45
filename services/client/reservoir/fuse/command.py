"""`reservoir fuse MOUNTPOINT [--path /datasets] [-d]` and `reservoir fuse --unmount MOUNTPOINT`."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from reservoir.cli.subcommands import Subcommands
from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.errors import AlreadyExists, InvalidArgument, NotFound

from .mount_spec import MountSpec
from .mountpoint import FSTYPE, MountPoint, MountState
from .run_record import (
    SupervisorRecord,
    live_supervisor,
    log_file,
    process_alive,
    record_file,
)


def register(commands: Subcommands) -> None:
    """Registers `fuse` on the CLI's subcommands."""
    p = commands.add(
        "fuse",
        "mount the namespace as a POSIX file system (FUSE; read-only unless --writable), "
        "kept mounted by a supervisor that restarts its serving process if it dies",
        cmd_fuse,
    )
    p.add_argument("mountpoint", metavar="MOUNTPOINT", help="an existing directory")
    p.add_argument(
        "--path", default="/", help="the Reservoir directory shown at MOUNTPOINT (default: /)"
    )
    p.add_argument(
        "-d",
        "--daemon",
        action="store_true",
        help="run in the background (log in the run directory); stop with --unmount",
    )
    p.add_argument(
        "--unmount",
        action="store_true",
        help="stop the supervisor of MOUNTPOINT and unmount it",
    )
    p.add_argument(
        "--allow-other",
        action="store_true",
        help="let other users read through the mount (needs root or user_allow_other in "
        "/etc/fuse.conf)",
    )
    p.add_argument(
        "--writable",
        action="store_true",
        help="take writes below the cluster's writable mounts: create and write files in "
        "order (published on close, atomically), rename files and directories, rm, mkdir, "
        "rmdir; appends and writes into the middle of a file are refused",
    )


def cmd_fuse(args: argparse.Namespace) -> None:
    config = cfg.load(cfg.FuseConfig)
    if args.unmount:
        _print(args, unmount(args.mountpoint, config), f"unmounted {args.mountpoint}")
        return
    spec = _spec(args)
    other = live_supervisor(config, spec.mountpoint)
    if other is not None:
        raise AlreadyExists(
            f"{spec.mountpoint} is served already (supervisor pid {other.supervisor_pid}, "
            f"path {other.path}): reservoir fuse --unmount {spec.mountpoint}"
        )
    mount = MountPoint(spec.mountpoint, config.stop_timeout_s)
    if mount.state() is MountState.LIVE:
        fstype = mount.fstype()
        hint = f" (its supervisor is gone: reservoir fuse --unmount {spec.mountpoint})"
        raise AlreadyExists(
            f"{spec.mountpoint}: a {fstype} file system is mounted there already"
            + (hint if fstype == FSTYPE else "")
        )
    if args.daemon:
        record = start_daemon(spec, config)
        _print(
            args,
            record.__dict__,
            f"mounted {record.path} at {record.mountpoint} (supervisor pid "
            f"{record.supervisor_pid}, log {record.log}; stop: reservoir fuse --unmount "
            f"{record.mountpoint})",
        )
        return
    # In the foreground the supervisor's events are what the user watches: at info.
    logs.configure_output(cfg.load(cfg.LogConfig))
    from .supervisor import Supervisor

    status = Supervisor(spec, config).run()
    if status:
        sys.exit(status)


def _print(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    print(json.dumps(data, indent=2) if getattr(args, "json", False) else text)


def _spec(args: argparse.Namespace) -> MountSpec:
    directory = Path(args.mountpoint)
    if not directory.is_dir():
        raise NotFound(f"{args.mountpoint}: no such directory (create the mount point first)")
    if not os.path.exists("/dev/fuse"):
        raise FileNotFoundError("/dev/fuse is missing: this machine (or container) has no FUSE")
    return MountSpec(
        mountpoint=os.path.realpath(directory),
        path=args.path,
        master=getattr(args, "master", None) or "",
        state_dir=str(getattr(args, "state_dir", "") or ""),
        allow_other=args.allow_other,
        writable=args.writable,
    )


def start_daemon(spec: MountSpec, config: cfg.FuseConfig) -> SupervisorRecord:
    """A supervisor in a session of its own, logging to a file; returns once it mounted."""
    log = log_file(config, spec.mountpoint)
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with log.open("ab") as out:
        start = out.tell()
        daemon = subprocess.Popen(
            [sys.executable, "-m", "reservoir.fuse.supervisor", *spec.to_args(), "--log", str(log)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=out,
            start_new_session=True,
        )
    file = record_file(config, spec.mountpoint)
    deadline = time.monotonic() + config.mount_timeout_s + config.stop_timeout_s
    while time.monotonic() < deadline:
        record = SupervisorRecord.load(file)
        if record is not None and (record.supervisor_pid, record.state) == (daemon.pid, "mounted"):
            return record
        if daemon.poll() is not None:
            raise DaemonStartError(spec.mountpoint, log, start)
        time.sleep(0.05)
    daemon.terminate()
    raise TimeoutError(
        f"{spec.mountpoint}: not mounted after {config.mount_timeout_s}s (log {log})"
    )


class DaemonStartError(OSError):
    """The daemon stopped before it mounted: its last log lines say why."""

    def __init__(self, mountpoint: str, log: Path, start: int) -> None:
        with log.open("rb") as f:
            f.seek(start)
            lines = f.read().decode(errors="replace").strip().splitlines()[-5:]
        super().__init__(
            f"{mountpoint}: the supervisor stopped before mounting (log {log}):\n  "
            + "\n  ".join(lines)
        )


def unmount(mountpoint: str, config: cfg.FuseConfig) -> dict[str, Any]:
    """Stops the supervisor of `mountpoint` (its child unmounts), then makes sure nothing
    of ours is left mounted there."""
    mount = MountPoint(mountpoint, config.stop_timeout_s)
    record = live_supervisor(config, mount.path)
    stopped = 0
    if record is not None:
        os.kill(record.supervisor_pid, signal.SIGTERM)
        deadline = time.monotonic() + 2 * config.stop_timeout_s
        while process_alive(record.supervisor_pid):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"supervisor pid {record.supervisor_pid} of {mount.path} did not stop "
                    f"in {2 * config.stop_timeout_s}s"
                )
            time.sleep(0.05)
        stopped = record.supervisor_pid
    record_file(config, mount.path).unlink(missing_ok=True)  # left by a killed supervisor
    state = mount.state()
    if state is MountState.ABSENT:
        if not stopped:
            raise InvalidArgument(f"{mount.path}: not mounted")
    elif mount.fstype() == FSTYPE:
        # No supervisor (it was killed, or this is a mount it left): unmount directly.
        mount.unmount(lazy=state is MountState.DEAD)
    else:
        raise InvalidArgument(
            f"{mount.path}: a {mount.fstype()} file system, not Reservoir's: left alone"
        )
    return {"mountpoint": mount.path, "supervisor_pid": stopped}
