"""One process of a local cluster, as recorded in its state directory."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path


class ClusterError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
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

    def alive(self) -> bool:
        if self.pid <= 0:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        try:  # a zombie (exited, not reaped) is not alive
            state = Path(f"/proc/{self.pid}/stat").read_text().split(")")[-1].split()[0]
            return state != "Z"
        except OSError:
            return True


def tail(path: str, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
