"""Which under-stores a mount may point at, decided before the master contacts any.

The operator lists the URI schemes allowed (`RESERVOIR_ALLOWED_SCHEMES`, default `s3`:
`file` exposes the master's and workers' own disks and is allowed only when listed) and,
optionally, the only endpoints allowed (`RESERVOIR_ALLOWED_ENDPOINTS`). Endpoints that
resolve to link-local addresses (cloud instance metadata services live there) are always
refused: a mount must never turn the cluster's credentials into requests to them.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from reservoir.common.errors import InvalidArgument, PermissionDenied
from reservoir.common.models import MountOptions
from reservoir.common.understore.store_schemes import scheme_of

# Metadata services that are not on a link-local address.
_METADATA_HOSTS = frozenset(
    {"metadata", "metadata.google.internal", "instance-data", "instance-data.ec2.internal"}
)
_METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("100.100.100.200"), ipaddress.ip_address("fd00:ec2::254")}
)

Resolver = Callable[[str], list[str]]


def _resolve(host: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return []  # unresolvable: the mount's probe will say it cannot connect
    return [str(info[4][0]) for info in infos]


def _endpoint_key(url: str) -> str:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{host}:{port}"


class MountPolicy:
    def __init__(
        self,
        allowed_schemes: str,
        allowed_endpoints: str = "",
        resolve: Resolver = _resolve,
    ) -> None:
        self.schemes = frozenset(s.strip().lower() for s in allowed_schemes.split(",") if s.strip())
        self.endpoints = frozenset(
            _endpoint_key(e.strip()) for e in allowed_endpoints.split(",") if e.strip()
        )
        self._resolve = resolve

    def check(self, uri: str, options: MountOptions) -> None:
        """PermissionDenied when the mount may not be made; nothing is contacted here
        beyond a DNS lookup of the endpoint's name."""
        scheme = scheme_of(uri)
        if scheme.name not in self.schemes:
            raise PermissionDenied(
                f"under-store scheme {scheme.name!r} is not allowed on this cluster "
                f"(allowed: {', '.join(sorted(self.schemes)) or 'none'}; RESERVOIR_ALLOWED_SCHEMES)"
            )
        if scheme.endpoint_in_uri:
            if options.endpoint_url:
                raise InvalidArgument(
                    f"a {scheme.name}:// mount's URI is its endpoint: drop endpoint_url"
                )
            self._check_endpoint(uri, scheme.name)
        elif options.endpoint_url:
            self._check_endpoint(options.endpoint_url)
        elif (
            scheme.default_endpoint
            and self.endpoints
            and scheme.default_endpoint not in self.endpoints
        ):
            raise PermissionDenied(
                f"a mount without endpoint_url uses the public endpoint {scheme.default_endpoint}, "
                "which is not in "
                "this cluster's allowed endpoints (RESERVOIR_ALLOWED_ENDPOINTS)"
            )

    def _check_endpoint(self, url: str, uri_scheme: str = "http") -> None:
        """`url`: an endpoint_url, or the URI of a store whose URI names its endpoint
        (`uri_scheme`: webhdfs://namenode:port/ is checked as http://namenode:port/)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https", uri_scheme) or not parts.hostname:
            raise InvalidArgument("endpoint_url must be http(s)://host[:port]")
        host = parts.hostname.lower().rstrip(".")
        if host in _METADATA_HOSTS:
            raise PermissionDenied(f"endpoint {host} is a metadata service: refused")
        for address in [host, *self._resolve(host)]:
            try:
                ip = ipaddress.ip_address(address.split("%", 1)[0])
            except ValueError:
                continue
            if ip.is_link_local or ip in _METADATA_ADDRESSES:
                raise PermissionDenied(
                    f"endpoint {host} is a link-local or metadata address: refused"
                )
        if self.endpoints and _endpoint_key(url) not in self.endpoints:
            raise PermissionDenied(
                f"endpoint {host} is not in this cluster's allowed endpoints "
                "(RESERVOIR_ALLOWED_ENDPOINTS)"
            )
