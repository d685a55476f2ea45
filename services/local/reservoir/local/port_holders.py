"""Which process holds a TCP port on this machine, for refusals that name it.

Read from /proc (the sockets of /proc/net/tcp and tcp6, matched to the socket inodes in
each process's /proc/PID/fd), so it needs no package (`ss -ltnp` reads the same tables).
A process of another user keeps its fds to itself: then only "a process of another user"
can be said.
"""

from __future__ import annotations

from pathlib import Path

_PROC = Path("/proc")
_LISTEN = "0A"  # the TCP state /proc/net/tcp writes for a listening socket


def holder(port: int, proc: Path = _PROC) -> str:
    """Who holds `port`: "pid 4242 (python3)", or "a process of another user"; "" when
    no socket of this machine's network namespace uses it (or there is no /proc)."""
    tables = [proc / "net" / "tcp", proc / "net" / "tcp6"]
    inodes = _socket_inodes(port, tables)
    if not inodes:
        return ""
    holders = _processes_with(inodes, proc)
    if not holders:
        return "a process of another user (its pid is not visible to this one)"
    return ", ".join(f"pid {pid} ({name})" for pid, name in holders)


def _socket_inodes(port: int, tables: list[Path]) -> list[str]:
    """The inodes of the sockets bound to `port`, listening ones first (a listener is
    what keeps a server from it; a connection's local end can too)."""
    listening: list[str] = []
    other: list[str] = []
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or int(fields[1].rsplit(":", 1)[1], 16) != port:
                continue
            inode = fields[9]
            if inode == "0":  # TIME_WAIT and the like: no process holds it
                continue
            (listening if fields[3] == _LISTEN else other).append(inode)
    return listening or other


def _processes_with(inodes: list[str], proc: Path) -> list[tuple[int, str]]:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    found: list[tuple[int, str]] = []
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = list((pid_dir / "fd").iterdir())
        except OSError:  # another user's process, or one that just exited
            continue
        for fd in fds:
            try:
                target = str(fd.readlink())
            except OSError:
                continue
            if target in wanted:
                found.append((int(pid_dir.name), _command_name(pid_dir)))
                break
    return sorted(found)


def _command_name(pid_dir: Path) -> str:
    try:
        return (pid_dir / "comm").read_text().strip()
    except OSError:
        return "?"
