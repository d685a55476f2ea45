"""Hosts made of network namespaces, for tests of what depends on where things run.

`HostNetwork` builds, on this machine, a bridge in the root namespace and one network
namespace per host, each joined to the bridge by a veth pair and given its own address
from a /24 that only this network uses (10.77.x.0/24, x picked at random among the ones no
interface of this machine has). The root namespace is on the bridge too (`.1`), so servers
listening there on that address (etcd, S3, the master) are reachable from every host, as
a cluster's services are from its nodes. `cut`/`mend` take a host's link down and up, as a
pulled cable or a dead switch port would. `remove` undoes all of it (every name carries a
tag of this network's, so nothing else is touched).

Creating namespaces needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the `ip` command:
`unavailable()` says why a machine cannot, for a skip.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field


def _ip(*args: str, namespace: str = "") -> str:
    argv = ["ip", *(("-n", namespace) if namespace else ()), *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def unavailable() -> str:
    """Why network namespaces cannot be made here; empty when they can."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    probe = f"rsvprobe{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except OSError as exc:
        return f"network namespaces cannot be created here ({exc})"
    with contextlib.suppress(OSError):
        _ip("netns", "del", probe)
    return ""


def _free_subnet() -> int:
    """An x such that no interface here has an address in 10.77.x.0/24."""
    used = _ip("-4", "-o", "addr", "show")
    choices = [x for x in range(2, 254) if f" 10.77.{x}." not in used]
    return random.choice(choices)


@dataclass
class Host:
    name: str  # e.g. "h1": also the host id its processes are told (RESERVOIR_HOST)
    namespace: str
    address: str
    veth: str  # its link's end on the bridge (root namespace)

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host's network namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


@dataclass
class HostNetwork:
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:5])
    subnet: int = 0
    hosts: dict[str, Host] = field(default_factory=dict)
    _links: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"rsvbr{self.tag}"

    @property
    def root_address(self) -> str:
        """The root namespace's address on the bridge: where shared services listen."""
        return f"10.77.{self.subnet}.1"

    def create(self, names: list[str]) -> None:
        """The bridge and a host per name (call `remove` afterwards, even if this fails)."""
        self.subnet = _free_subnet()
        _ip("link", "add", self.bridge, "type", "bridge")
        self._links.append(self.bridge)
        _ip("addr", "add", f"{self.root_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for number, name in enumerate(names, start=10):
            host = Host(
                name=name,
                namespace=f"rsv{self.tag}{name}",
                address=f"10.77.{self.subnet}.{number}",
                veth=f"rsv{self.tag}{name}",
            )
            peer = f"rsp{self.tag}{name}"
            _ip("netns", "add", host.namespace)
            self.hosts[name] = host
            _ip("link", "add", host.veth, "type", "veth", "peer", "name", peer)
            self._links.append(host.veth)
            _ip("link", "set", peer, "netns", host.namespace)
            _ip("link", "set", host.veth, "master", self.bridge, "up")
            _ip("link", "set", "lo", "up", namespace=host.namespace)
            _ip("addr", "add", f"{host.address}/24", "dev", peer, namespace=host.namespace)
            _ip("link", "set", peer, "up", namespace=host.namespace)

    def cut(self, name: str) -> None:
        """Host `name` drops off the network (its link goes down; its processes live on)."""
        _ip("link", "set", self.hosts[name].veth, "down")

    def mend(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].veth, "up")

    def cap(self, name: str, mbit: int) -> None:
        """What host `name` sends onto the network at most `mbit` Mbit/s (tbf on its end of
        the link): a node whose NIC is shared, or a slower one. Its own block files, read
        by its own clients, do not cross it."""
        host = self.hosts[name]
        argv = ["tc", "qdisc", "replace", "dev", f"rsp{self.tag}{name}", "root", "tbf",
                "rate", f"{mbit}mbit", "burst", "256kb", "latency", "200ms"]  # fmt: skip
        done = subprocess.run(host.command(argv), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise OSError(f"{' '.join(argv)}: {done.stderr.strip()}")

    def remove(self) -> None:
        """Everything `create` made, whatever state it is in."""
        for host in self.hosts.values():
            with contextlib.suppress(OSError):
                _ip("netns", "del", host.namespace)  # takes its veth pair with it
        for link in reversed(self._links):
            with contextlib.suppress(OSError):
                _ip("link", "del", link)
        self.hosts.clear()
        self._links.clear()
