"""The supervisor: owns a mount point and keeps a serving process on it.

The serving process (`server.py`) runs as a child in a fresh interpreter. When it dies
without unmounting (SIGKILL, the OOM killer, a crash in libfuse) its mount is left dead:
every call on it fails with ENOTCONN. The supervisor sees the child exit at once (a pidfd),
unmounts the dead mount lazily (`fusermount3 -uz`: programs holding files on it get
errors, the directory is free again at once) and starts a new child, which mounts again,
so new opens work without anyone remounting: Fluid's FUSE auto-recovery, in one process.

Restarts are bounded (`RestartPolicy`). A child that exits after its mount went away was
unmounted on purpose (`fusermount3 -u`, `umount`, SIGTERM to it): the supervisor stops
too. SIGTERM, SIGINT or SIGHUP to the supervisor stops the child, which unmounts, then the
supervisor (what `reservoir fuse --unmount` does).

    python -m reservoir.fuse.supervisor MOUNTPOINT --path /datasets --state-dir DIR
"""

from __future__ import annotations

import argparse
import collections
import os
import select
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from types import FrameType

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.errors import AlreadyExists, ReservoirError

from .mount_spec import MountSpec
from .mountpoint import MountPoint, MountState
from .run_record import SupervisorRecord, live_supervisor, record_file
from .server import EXIT_SETUP

log = logs.get_logger(__name__)

_POLL_S = 0.02  # how often a starting child's mount is looked for
_STOP_CHECK_S = 0.25  # how soon a stop request is noticed while a child serves


class RestartPolicy:
    """At most `max_restarts` restarts within `restart_window_s`; the first at once, each
    further one after a backoff doubling from `restart_backoff_s` to its maximum."""

    def __init__(self, config: cfg.FuseConfig) -> None:
        self._config = config
        self._recent: collections.deque[float] = collections.deque()

    def next_delay(self, now: float) -> float | None:
        """The wait before the next restart, or None: too many, give up."""
        while self._recent and now - self._recent[0] > self._config.restart_window_s:
            self._recent.popleft()
        if len(self._recent) >= self._config.max_restarts:
            return None
        earlier = len(self._recent)
        self._recent.append(now)
        if earlier == 0:
            return 0.0
        backoff = self._config.restart_backoff_s * 2 ** (earlier - 1)
        return float(min(self._config.restart_backoff_max_s, backoff))


def _exit_status(code: int | None) -> str:
    if code is None:
        return "running"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


class Supervisor:
    """Keeps `spec` mounted until it is asked to stop or gives up; `run` returns the exit
    status of the command (0 stopped or unmounted, 1 could not mount or gave up)."""

    def __init__(self, spec: MountSpec, config: cfg.FuseConfig, *, log_path: str = "") -> None:
        self._spec = spec
        self._config = config
        self._mount = MountPoint(spec.mountpoint, config.stop_timeout_s)
        self._file = record_file(config, self._mount.path)
        self._record = SupervisorRecord(
            mountpoint=self._mount.path,
            path=spec.path,
            master=spec.master,
            supervisor_pid=os.getpid(),
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            log=log_path,
        )
        self._policy = RestartPolicy(config)
        self._stop = threading.Event()
        self._child: subprocess.Popen[bytes] | None = None
        self._child_started = 0.0

    def request_stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        self._stop.set()

    def run(self) -> int:
        self._claim()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self.request_stop)
        try:
            return self._supervise()
        finally:
            self._shutdown()
            self._file.unlink(missing_ok=True)

    # ---- the loop ----------------------------------------------------------------------

    def _claim(self) -> None:
        """Refuses a mount point served already; clears one left dead by an earlier run."""
        other = live_supervisor(self._config, self._mount.path)
        if other is not None:
            raise AlreadyExists(
                f"{self._mount.path} is served already by supervisor pid "
                f"{other.supervisor_pid} (stop it: reservoir fuse --unmount {self._mount.path})"
            )
        state = self._mount.state()
        if state is MountState.LIVE:
            raise AlreadyExists(
                f"{self._mount.path}: a {self._mount.fstype()} file system is mounted there already"
            )
        if state is MountState.DEAD:
            log.info("fuse_dead_mount_cleared", mountpoint=self._mount.path)
            self._mount.unmount(lazy=True)
        self._save(state="starting")

    def _supervise(self) -> int:
        child = self._start(check=True)
        if not self._mounted(child):
            if not self._stop.is_set():
                log.error(
                    "fuse_start_failed",
                    mountpoint=self._mount.path,
                    status=_exit_status(child.returncode),
                )
            return 0 if self._stop.is_set() else 1
        while True:
            self._wait_for_exit(child)
            if self._stop.is_set():
                return 0
            if self._mount.state() is MountState.ABSENT:
                log.info(
                    "fuse_unmounted_elsewhere",
                    mountpoint=self._mount.path,
                    pid=child.pid,
                    status=_exit_status(child.returncode),
                )
                return 0
            log.warning(
                "fuse_server_died",
                mountpoint=self._mount.path,
                pid=child.pid,
                status=_exit_status(child.returncode),
                uptime_s=round(time.monotonic() - self._child_started, 1),
            )
            restarted = self._restart()
            if restarted is None:
                return 0 if self._stop.is_set() else 1
            child = restarted

    def _restart(self) -> subprocess.Popen[bytes] | None:
        """A new child serving the mount point again; None when stopped or given up."""
        while not self._stop.is_set():
            self._clear_dead_mount()
            delay = self._policy.next_delay(time.monotonic())
            if delay is None:
                log.error(
                    "fuse_gave_up",
                    mountpoint=self._mount.path,
                    restarts=self._record.restarts,
                    window_s=self._config.restart_window_s,
                )
                return None
            self._save(state="restarting")
            if delay:
                log.info("fuse_restart_backoff", mountpoint=self._mount.path, delay_s=delay)
                if self._stop.wait(delay):
                    return None
            self._record.restarts += 1
            child = self._start(check=False)
            if self._mounted(child):
                return child
            if child.returncode == EXIT_SETUP:
                log.error("fuse_cannot_serve", mountpoint=self._mount.path)
                return None
        return None

    # ---- the child ---------------------------------------------------------------------

    def _start(self, *, check: bool) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "reservoir.fuse.server", *self._spec.to_args()]
        if check:
            command.append("--check")
        # Its stderr is ours: its log lines go where the supervisor's go.
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        self._child, self._child_started = child, time.monotonic()
        self._save(server_pid=child.pid)
        log.info(
            "fuse_server_started",
            mountpoint=self._mount.path,
            path=self._spec.path,
            pid=child.pid,
            restarts=self._record.restarts,
        )
        return child

    def _mounted(self, child: subprocess.Popen[bytes]) -> bool:
        """Waits until the child's mount is in the mount table; False when it exited, the
        supervisor is stopping, or it took longer than `mount_timeout_s` (then it is
        killed)."""
        deadline = time.monotonic() + self._config.mount_timeout_s
        while time.monotonic() < deadline:
            if self._mount.is_mounted():
                self._save(state="mounted")
                log.info(
                    "fuse_mounted",
                    mountpoint=self._mount.path,
                    path=self._spec.path,
                    pid=child.pid,
                    seconds=round(time.monotonic() - self._child_started, 2),
                )
                return True
            if child.poll() is not None or self._stop.wait(_POLL_S):
                return False
        log.warning(
            "fuse_mount_timeout",
            mountpoint=self._mount.path,
            pid=child.pid,
            timeout_s=self._config.mount_timeout_s,
        )
        child.kill()
        child.wait()
        return False

    def _wait_for_exit(self, child: subprocess.Popen[bytes]) -> None:
        """Returns as soon as the child exits (its pidfd turns readable) or a stop is asked."""
        pidfd = os.pidfd_open(child.pid)
        try:
            while child.poll() is None and not self._stop.is_set():
                select.select([pidfd], [], [], _STOP_CHECK_S)
        finally:
            os.close(pidfd)

    def _clear_dead_mount(self) -> None:
        if self._mount.state() is not MountState.DEAD:
            return
        try:
            self._mount.unmount(lazy=True)
            log.info("fuse_dead_mount_cleared", mountpoint=self._mount.path)
        except OSError as exc:
            log.error("fuse_unmount_failed", mountpoint=self._mount.path, error=str(exc))

    def _shutdown(self) -> None:
        child = self._child
        if child is not None and child.poll() is None:
            self._save(state="stopping")
            child.terminate()  # libfuse unmounts and the loop ends
            try:
                child.wait(self._config.stop_timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("fuse_server_stop_timeout", pid=child.pid)
                child.kill()
                child.wait()
        try:
            self._clear_dead_mount()
        except OSError as exc:
            log.error("fuse_unmount_failed", mountpoint=self._mount.path, error=str(exc))
        log.info("fuse_stopped", mountpoint=self._mount.path, restarts=self._record.restarts)

    def _save(self, **changes: object) -> None:
        for name, value in changes.items():
            setattr(self._record, name, value)
        self._record.save(self._file)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reservoir.fuse.supervisor")
    MountSpec.add_arguments(parser)
    parser.add_argument("--log", default="", help="where this daemon's stderr goes (recorded)")
    args = parser.parse_args(argv)
    logs.configure_output(cfg.load(cfg.LogConfig))
    try:
        supervisor = Supervisor(
            MountSpec.from_args(args), cfg.load(cfg.FuseConfig), log_path=args.log
        )
        return supervisor.run()
    except (ReservoirError, OSError, ValueError) as exc:
        print(f"reservoir fuse: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
