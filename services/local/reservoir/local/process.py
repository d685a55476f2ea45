"""The processes of a local cluster: how each is recorded, started, awaited and stopped."""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class ClusterError(RuntimeError):
    pass


# Ports for servers are picked below the kernel's ephemeral range. A port the kernel hands
# out for bind(0) is one it also hands out as the local end of outgoing connections, and
# between the pick and the server's bind a connection of anything on the machine (clients,
# servers dialing each other) could take it: "address already in use" at start, now and
# then. Below the range only other listeners compete, and those check first.
_LOWEST_PORT = 10_000
_PICKS = 100
# Ports this process handed out lately. A pick is not bound until its server starts, so
# without this two picks for one cluster (a master's gRPC and metrics ports) could be the
# same free port, and the second server to bind fails.
_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=4096)


def free_port() -> int:
    """A port a server may listen on at 127.0.0.1: a random free one below the ephemeral
    range where there is room, else one the kernel picks."""
    low, _ = _ephemeral_range()
    for _ in range(_PICKS if low - _LOWEST_PORT >= 1_000 else 0):
        port = random.randrange(_LOWEST_PORT, low)
        if port not in _HANDED_OUT and port_is_free(port):
            return _handed_out(port)
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            return _handed_out(port)


def _handed_out(port: int) -> int:
    _HANDED_OUT.append(port)
    return port


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999  # Linux's default


def port_is_free(port: int) -> bool:
    """Whether a server could listen on `port` now. Servers set SO_REUSEADDR, so the port's
    old connections in TIME_WAIT (for a minute after a server stops, e.g. the S3 server of
    a cluster just stopped) do not keep them from it; nor may they keep this check from it."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Process:
    name: str
    argv: list[str]
    env: dict[str, str]
    port: int
    log: str
    pid: int = 0
    # Where a server serves Prometheus /metrics (127.0.0.1); 0 for etcd and S3.
    metrics_port: int = 0
    # An etcd member's port for its peers (0 for everything else).
    peer_port: int = 0

    def alive(self) -> bool:
        if self.pid <= 0:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        try:  # a zombie (exited, not reaped) is not alive
            state = Path(f"/proc/{self.pid}/stat").read_text().split(")")[-1].split()[0]
            if state == "Z":
                return False
            # After a reboot the pid may belong to some other program: not ours.
            # (Empty while a process is starting: not a verdict.)
            cmdline = [a for a in Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0") if a]
            return not cmdline or [a.decode(errors="replace") for a in cmdline] == self.argv
        except OSError:
            return True


def tail(path: str, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Supervisor:
    """Starts processes in sessions of their own (they outlive `reservoir local up` and are
    not hit by its Ctrl-C) and stops them, reaping the ones it started."""

    def __init__(self) -> None:
        self._popen: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, proc: Process) -> None:
        log = open(proc.log, "ab")  # noqa: SIM115 - handed to the child
        popen = subprocess.Popen(
            proc.argv,
            env={**os.environ, **proc.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        proc.pid = popen.pid
        self._popen[proc.name] = popen

    def wait_ready(self, proc: Process, ready: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not proc.alive():
                raise ClusterError(
                    f"{proc.name} exited at start; see {proc.log}:\n{tail(proc.log)}"
                )
            try:
                if ready():
                    return
            except Exception:
                pass
            time.sleep(0.05)
        raise ClusterError(f"{proc.name} not ready after {timeout_s}s; see {proc.log}")

    def kill(self, proc: Process, sig: int = signal.SIGKILL) -> None:
        """Sends `sig` to the process group; for a signal that ends it, waits until it has
        (SIGKILL after 10 s). A pause or resume (SIGSTOP, SIGCONT) returns at once: the
        process lives on, frozen or thawed."""
        if proc.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        if sig in (signal.SIGSTOP, signal.SIGCONT, signal.SIGTSTP):
            return
        popen = self._popen.pop(proc.name, None)
        if popen is not None:
            try:
                popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                popen.wait(timeout=10)
        else:
            deadline = time.monotonic() + 10
            while proc.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if proc.alive():
                os.killpg(proc.pid, signal.SIGKILL)

    def stop(self, proc: Process, timeout_s: float) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        self.stop_all([proc], timeout_s)

    def stop_all(self, procs: list[Process], timeout_s: float) -> None:
        """SIGTERM to each, then SIGKILL to those not gone in `timeout_s`: they stop side
        by side, so a group takes as long as its slowest member, not their sum."""
        stopping = [p for p in procs if p.alive()]
        for proc in stopping:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for proc in stopping:
                popen = self._popen.get(proc.name)
                if popen is not None:
                    popen.poll()
            if not any(p.alive() for p in stopping):
                break
            time.sleep(0.05)
        for proc in stopping:
            self.kill(proc)
