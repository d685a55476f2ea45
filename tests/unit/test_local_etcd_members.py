"""How the local launcher runs etcd: one member, or a cluster of several (no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reservoir.local.etcd_members import (
    Member,
    is_member,
    member_names,
    member_process,
    metadata_url,
)
from reservoir.local.process import ClusterError


def flags(argv: list[str]) -> dict[str, str]:
    return {argv[i].removeprefix("--"): argv[i + 1] for i in range(1, len(argv) - 1, 2)}


def test_three_members_list_the_same_peers_keep_their_own_data_and_compact() -> None:
    members = [
        Member("etcd1", 2001, 3001),
        Member("etcd2", 2002, 3002),
        Member("etcd3", 2003, 3003),
    ]
    state = Path("/state")
    procs = [member_process(m, members, state, None) for m in members]
    parsed = [flags(p.argv) for p in procs]
    expected = "etcd1=http://127.0.0.1:3001,etcd2=http://127.0.0.1:3002,etcd3=http://127.0.0.1:3003"
    assert {f["initial-cluster"] for f in parsed} == {expected}
    assert [f["name"] for f in parsed] == ["etcd1", "etcd2", "etcd3"]
    assert [f["data-dir"] for f in parsed] == [f"/state/etcd-data/etcd{n}" for n in (1, 2, 3)]
    assert [f["advertise-client-urls"] for f in parsed] == [
        f"http://127.0.0.1:{port}" for port in (2001, 2002, 2003)
    ]
    assert all(f["auto-compaction-mode"] == "periodic" for f in parsed)
    assert [(p.name, p.port, p.peer_port) for p in procs] == [
        (m.name, m.client_port, m.peer_port) for m in members
    ]
    assert metadata_url(members) == "etcd://127.0.0.1:2001,127.0.0.1:2002,127.0.0.1:2003"


def test_one_member_keeps_the_name_and_data_dir_a_single_etcd_always_had() -> None:
    [member] = [Member("etcd", 2001, 3001)]
    proc = member_process(member, [member], Path("/state"), None, ("--quota-backend-bytes", "9"))
    parsed = flags(proc.argv)
    assert proc.name == "etcd" and parsed["name"] == "reservoir-local"
    assert parsed["data-dir"] == "/state/etcd-data"
    assert parsed["quota-backend-bytes"] == "9"  # extra flags come last: they win
    assert metadata_url([member]) == "etcd://127.0.0.1:2001"


def test_member_names_and_which_processes_are_members() -> None:
    assert member_names(1) == ["etcd"]
    assert member_names(3) == ["etcd1", "etcd2", "etcd3"]
    with pytest.raises(ClusterError, match="at least one member"):
        member_names(0)
    assert [n for n in ("etcd", "etcd2", "etcdx", "master", "worker1") if is_member(n)] == [
        "etcd",
        "etcd2",
    ]
