"""Which datanodes the webhdfs:// store follows a namenode's redirect to.

A namenode sends reads and writes (OPEN, CREATE) to its datanodes: hosts the operator's
mount policy never saw. Following them blindly would let whoever answers as the namenode
send the cluster's requests anywhere (a cloud metadata service), and cache what came back
for the mount's readers. So a redirect is followed only to plain `http://` (the scheme
spoken to the namenode), one hop, and never to a link-local or metadata address, nor to
loopback or an unspecified address unless the namenode itself is on loopback (a
single-host cluster). The datanode's name is resolved once and checked, and the checked
address is the one connected to, so a second lookup cannot answer otherwise.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from reservoir.common.errors import PermissionDenied

# As the master's mount policy refuses them (mount_policy.py).
_METADATA_HOSTS = frozenset(
    {"metadata", "metadata.google.internal", "instance-data", "instance-data.ec2.internal"}
)
_METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("100.100.100.200"), ipaddress.ip_address("fd00:ec2::254")}
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # host:port as the URI or the redirect named it (error messages)
    address: str  # what is connected to
    port: int


@dataclass(frozen=True, slots=True)
class Redirect:
    endpoint: Endpoint
    target: str  # the request target to send it: path and query


def on_loopback(host: str) -> bool:
    """Whether every address `host` resolves to is a loopback one (False if none)."""
    addresses = _addresses(host, 0)
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def checked(location: str, loopback_ok: bool, what: str) -> Redirect | None:
    """Where a redirect's `Location` sends the request, once checked; PermissionDenied for
    a place refused, None when its host does not resolve (now)."""
    parts = urlsplit(location)
    if parts.scheme.lower() != "http" or not parts.hostname:
        raise PermissionDenied(
            f"{what}: the namenode redirected to a {parts.scheme or 'relative'} URL; "
            "only http:// datanodes are followed"
        )
    host, port = parts.hostname.lower().rstrip("."), parts.port or 80
    shown = f"{host}:{port}"
    if host in _METADATA_HOSTS:
        raise PermissionDenied(f"{what}: redirected to {shown}, a metadata service: refused")
    addresses = _addresses(host, port)
    for address in addresses:
        ip = ipaddress.ip_address(address)
        if ip.is_link_local or ip in _METADATA_ADDRESSES or ip.is_multicast:
            raise PermissionDenied(
                f"{what}: redirected to {shown}, a link-local or metadata address: refused"
            )
        if (ip.is_loopback or ip.is_unspecified) and not loopback_ok:
            raise PermissionDenied(
                f"{what}: redirected to {shown}, a loopback address, by a namenode that is "
                "not on loopback: refused"
            )
    if not addresses:
        return None
    return Redirect(Endpoint(shown, addresses[0], port), f"{parts.path or '/'}?{parts.query}")


def _addresses(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except OSError:
        return []
    return [str(info[4][0]).split("%", 1)[0] for info in infos]
