"""`reservoir://` with no master to answer: every fsspec call raises the mapped error
(a Python built-in), none answers False, [] or 0 as fsspec's own defaults would. The
filesystem runs over a real Client whose master address refuses connections (a bound
socket that does not listen) or accepts and never answers (a listening socket no one
serves), with a short RPC deadline."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from reservoir.client import Client
from reservoir.client.filesystem import ReservoirFileSystem
from reservoir.common import config as cfg

RPC_TIMEOUT_S = 0.2  # a silent master costs each call this (twice for some)

# Every call fsspec's defaults answer with False / [] / 0 on an error, and the ones built
# on them. The paths were never asked about, so nothing comes from the client's cache.
CALLS: dict[str, Callable[[ReservoirFileSystem], Any]] = {
    "find": lambda fs: fs.find("/data"),
    "find_withdirs": lambda fs: fs.find("/data", withdirs=True),
    "glob": lambda fs: fs.glob("/data/*.csv"),
    "glob_literal": lambda fs: fs.glob("/data/a.csv"),
    "walk": lambda fs: list(fs.walk("/data")),
    "du": lambda fs: fs.du("/data"),
    "exists": lambda fs: fs.exists("/data/a.csv"),
    "lexists": lambda fs: fs.lexists("/data/a.csv"),
    "isdir": lambda fs: fs.isdir("/data"),
    "isfile": lambda fs: fs.isfile("/data/a.csv"),
    "info": lambda fs: fs.info("/data/a.csv"),
    "ls": lambda fs: fs.ls("/data"),
    "expand_path": lambda fs: fs.expand_path("/data", recursive=True),
    "cat": lambda fs: fs.cat("/data/a.csv"),
    "cat_recursive": lambda fs: fs.cat("/data", recursive=True),
    "mapper_contains": lambda fs: "a.csv" in fs.get_mapper("/data"),
}


def _filesystem(master: str) -> Iterator[ReservoirFileSystem]:
    config = dataclasses.replace(
        cfg.load(cfg.ClientConfig), master=master, rpc_timeout_s=RPC_TIMEOUT_S
    )
    client = Client(config=config)
    try:
        yield ReservoirFileSystem(client=client, skip_instance_cache=True)
    finally:
        client.close()


@pytest.fixture
def refused() -> Iterator[ReservoirFileSystem]:
    """A master address where connections are refused (the master is down)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # bound, not listening: the port refuses, and stays ours
        yield from _filesystem(f"127.0.0.1:{held.getsockname()[1]}")


@pytest.fixture
def silent() -> Iterator[ReservoirFileSystem]:
    """A master address that accepts connections and never answers (a hung master)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield from _filesystem(f"127.0.0.1:{held.getsockname()[1]}")


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_each_call_raises_connection_error_when_the_master_refuses_connections(
    refused: ReservoirFileSystem, call: Callable[[ReservoirFileSystem], Any]
) -> None:
    with pytest.raises(ConnectionError, match="unreachable"):
        call(refused)


@pytest.mark.parametrize("name", ["find", "glob", "walk", "du", "exists", "isdir", "isfile"])
def test_each_call_raises_timeout_error_when_the_master_does_not_answer(
    silent: ReservoirFileSystem, name: str
) -> None:
    with pytest.raises(TimeoutError, match="deadline exceeded"):
        CALLS[name](silent)


def test_walk_still_hands_errors_to_a_callable_on_error_and_raises_with_raise(
    refused: ReservoirFileSystem,
) -> None:
    seen: list[OSError] = []
    assert list(refused.walk("/data", on_error=seen.append)) == []
    assert len(seen) == 1 and isinstance(seen[0], ConnectionError)
    with pytest.raises(ConnectionError):
        list(refused.walk("/data", on_error="raise"))
