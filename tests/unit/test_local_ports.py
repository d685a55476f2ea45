"""The local launcher's ports for servers: free, and out of the range the kernel hands out
as the local ends of outgoing connections (which could take a port between its pick and
the server's bind)."""

from __future__ import annotations

import collections
import socket
from pathlib import Path

import pytest

from reservoir.local import process
from reservoir.local.process import free_port, port_is_free


def test_server_ports_are_free_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert len(ports) > 1  # picked at random, not one port over and over
    for port in ports:
        assert port < low
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
            assert not port_is_free(port)  # a listener has it: never picked meanwhile


def test_a_port_is_not_handed_out_twice_before_its_server_binds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two picks for one cluster (a master's gRPC and metrics ports) are made before either
    # server binds: with every random pick landing on one free port, the second differs.
    monkeypatch.setattr(process, "_HANDED_OUT", collections.deque(maxlen=16))
    port = next(p for p in range(20_000, 30_000) if port_is_free(p))
    monkeypatch.setattr(process.random, "randrange", lambda low, high: port)
    assert free_port() == port
    assert free_port() != port
