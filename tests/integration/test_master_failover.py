"""Several masters on one etcd: the leader dies, resigns or is paused; a standby takes
over, callers follow it, and nothing the old leader does afterwards lands in etcd.

One cluster (3 masters, 2 workers) serves every test here; each test leaves it with
three masters running again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import grpc
import pytest

from reservoir.client import Client
from reservoir.common import errors
from reservoir.local.cluster import LocalCluster
from reservoir.v1 import common_pb2, master_pb2, master_pb2_grpc
from tests.conftest import LEASE_TTL_S, channel, own_cluster_env
from tests.eventually import eventually

BLOCK = 64 * 1024
MASTER_LEASE_TTL_S = 2
BUCKET = "failover"


@pytest.fixture(scope="module")
def masters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(
        tmp_path_factory.mktemp("masters"),
        workers=2,
        masters=3,
        lease_ttl=LEASE_TTL_S,
        env={"RESERVOIR_MASTER_LEASE_TTL": str(MASTER_LEASE_TTL_S)},
    )
    try:
        cluster.s3_client().create_bucket(Bucket=BUCKET)
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def healed(masters: LocalCluster) -> Iterator[LocalCluster]:
    """The shared cluster; whatever master a test stopped runs again after it."""
    yield masters
    for name in masters.master_names():
        proc = masters.processes[name]
        if proc.alive():
            os.kill(proc.pid, signal.SIGCONT)
        else:
            masters.restart(name)
    # Settled: one leader, every other master a standby that knows it.
    with Client(masters.master_address) as c:

        def settled() -> bool:
            try:
                listed = c.masters()
            except ConnectionError:
                return False
            leaders = [m for m in listed if m.role == "leader"]
            return (
                len(listed) == len(masters.master_names())
                and len(leaders) == 1
                and all(m.term == leaders[0].term for m in listed)
            )

        eventually(settled)


def _files(cluster: LocalCluster, prefix: str, count: int, size: int) -> dict[str, bytes]:
    s3 = cluster.s3_client()
    files = {f"f{i:03d}": os.urandom(size + i) for i in range(count)}
    for name, data in files.items():
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=data)
    return files


def _mount(c: Client, cluster: LocalCluster, prefix: str) -> str:
    path = f"/m/{prefix}"
    c.mount(path, f"s3://{BUCKET}/{prefix}/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
    return path


def _leader(c: Client, cluster: LocalCluster) -> tuple[str, int]:
    """The leading master's process name and term."""
    (leader,) = [m for m in c.masters() if m.role == "leader"]
    for name in cluster.master_names():
        if f"127.0.0.1:{cluster.processes[name].port}" == leader.address:
            return name, leader.term
    raise AssertionError(f"no process of the cluster at {leader.address}")


def _leader_or_none(c: Client, cluster: LocalCluster) -> str | None:
    try:
        return _leader(c, cluster)[0]
    except ConnectionError:  # the master asked is paused, or none leads yet
        return None


def _metrics(cluster: LocalCluster, name: str) -> str:
    with urllib.request.urlopen(cluster.metrics_url(name), timeout=10) as reply:
        return str(reply.read().decode())


def _log_events(cluster: LocalCluster, name: str) -> list[str]:
    return Path(cluster.processes[name].log).read_text().splitlines()


def test_sigkill_of_the_leader_mid_load_and_mid_reads_loses_no_read_and_the_job_completes(
    healed: LocalCluster,
) -> None:
    cluster, run = healed, uuid.uuid4().hex[:8]
    warm = _files(cluster, f"warm-{run}", 8, BLOCK * 2)
    cold = _files(cluster, f"cold-{run}", 40, BLOCK * 3)
    unseen = _files(cluster, f"unseen-{run}", 3, 1000)
    with Client(cluster.master_address) as c:
        warm_dir = _mount(c, cluster, f"warm-{run}")
        cold_dir = _mount(c, cluster, f"cold-{run}")
        unseen_dir = _mount(c, cluster, f"unseen-{run}")
        for name, data in warm.items():
            assert c.read(f"{warm_dir}/{name}") == data
        workers_before = {(w.id, w.started_ms) for w in c.workers()}
        stop, failures, reads = threading.Event(), [], [0]

        def reader(n: int) -> None:
            names = sorted(warm)
            while not stop.is_set():
                name = names[n % len(names)]
                n += 1
                try:
                    if c.read(f"{warm_dir}/{name}") != warm[name]:
                        failures.append(f"{name}: wrong bytes")
                except Exception as exc:
                    failures.append(f"{name}: {type(exc).__name__}: {exc}")
                reads[0] += 1

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        # Slow S3 reads keep the job loading when its leader dies.
        cluster.s3_config(latency_ms=150)
        job = c.submit_load(cold_dir)
        leader, term = _leader(c, cluster)
        eventually(lambda: c.job(job.id).state == "running", interval_s=0.02)
        cluster.kill(leader)
        # Each of these is one call: the client finds the new leader within its deadline.
        assert {e.path.rsplit("/", 1)[1] for e in c.ls(unseen_dir)} == set(unseen)
        assert c.stat(f"{cold_dir}/f039").size == len(cold["f039"])
        _mount(c, cluster, f"late-{run}")
        new_leader, new_term = _leader(c, cluster)
        assert new_leader != leader and new_term > term
        finished = c.watch_job(job.id)
        cluster.s3_config(latency_ms=0)
        stop.set()
        for t in threads:
            t.join()
        assert failures == []
        assert reads[0] > 0
        assert finished.state == "completed"
        assert finished.attempts == 2  # resumed by the new leader
        total = sum(-(-len(d) // BLOCK) for d in cold.values())
        assert finished.total_blocks == total and finished.failed_blocks == 0
        # Exact within seconds: the workers re-report to the new leader.
        eventually(lambda: c.report(cold_dir).cached_blocks == total)
        # The same workers, not registered again: their leases are their own.
        assert {(w.id, w.started_ms) for w in c.workers()} == workers_before
        for name, data in cold.items():
            assert c.read(f"{cold_dir}/{name}") == data


def test_sigterm_of_the_leader_resigns_and_a_standby_takes_over(healed: LocalCluster) -> None:
    cluster, run = healed, uuid.uuid4().hex[:8]
    files = _files(cluster, f"term-{run}", 2, 1000)
    with Client(cluster.master_address) as c:
        leader, term = _leader(c, cluster)
        cluster.stop(leader)  # SIGTERM
        assert any(
            '"why": "resigned"' in line and "leadership_stepping_down" in line
            for line in _log_events(cluster, leader)
        )
        new_leader, new_term = _leader(c, cluster)
        # Two standbys campaigning at once may each take a term (the loser's goes unused):
        # a later leader's term is higher, not always the next one.
        assert new_leader != leader and new_term > term
        # The record names the winner before its duties have started; it serves (and its
        # gauge says 1) once they have.
        eventually(lambda: "reservoir_master_leader 1.0" in _metrics(cluster, new_leader))
        leading = _metrics(cluster, new_leader)
        assert 'reservoir_master_role{role="leader"} 1.0' in leading
        assert f"reservoir_master_term {float(new_term)}" in leading
        assert "reservoir_master_takeovers_total 1.0" in leading
        standby = next(n for n in cluster.master_names() if n not in (leader, new_leader))
        assert 'reservoir_master_role{role="standby"} 1.0' in _metrics(cluster, standby)
        mounted = _mount(c, cluster, f"term-{run}")
        assert {e.path.rsplit("/", 1)[1] for e in c.ls(mounted)} == set(files)
        roles = sorted(m.role for m in c.masters())
        assert roles == ["leader", "standby"]  # the resigned one left the records


def test_a_paused_leader_past_its_lease_writes_nothing_and_comes_back_as_a_standby(
    healed: LocalCluster,
) -> None:
    cluster, run = healed, uuid.uuid4().hex[:8]
    _files(cluster, f"pause-{run}", 2, 1000)
    _files(cluster, f"stale-{run}", 2, 1000)
    with Client(cluster.master_address) as c:
        paused, term = _leader(c, cluster)
        os.kill(cluster.processes[paused].pid, signal.SIGSTOP)
        # Another master leads once the paused one's lease has run out. (A call that went
        # to the paused one meanwhile ran into its deadline; the next goes elsewhere.)
        eventually(lambda: _leader_or_none(c, cluster) not in (None, paused))
        changed = _mount(c, cluster, f"pause-{run}")
        # A call the paused leader will find waiting when it wakes, from a caller that
        # still takes it for the leader.
        stale = master_pb2.MountRequest(
            path=f"/m/stale-{run}",
            uri=f"s3://{BUCKET}/stale-{run}/",
            options=common_pb2.MountOptions(endpoint_url=cluster.s3_endpoint),
        )
        port = cluster.processes[paused].port
        earlier = _connections_to(port)
        with channel(f"127.0.0.1:{port}") as ch:
            pending = master_pb2_grpc.MasterServiceStub(ch).Mount.future(stale, timeout=30)
            # The kernel holds the call for the stopped process: more bytes waiting to be read
            # on a connection to its port (gRPC may reuse one this process already has).
            eventually(
                lambda: any(
                    queued > earlier.get(peer, 0) for peer, queued in _connections_to(port).items()
                ),
                what="the call waiting in the paused master's socket",
            )
            os.kill(cluster.processes[paused].pid, signal.SIGCONT)
            with pytest.raises(grpc.RpcError) as refused:
                pending.result()
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        mounted = {m.path for m in c.mounts()}
        assert changed in mounted
        assert f"/m/stale-{run}" not in mounted
        paused_master = f"127.0.0.1:{cluster.processes[paused].port}"

        def one_leader_and_the_paused_one_stands_by() -> bool:
            listed = {m.address: m.role for m in c.masters()}
            return (
                list(listed.values()).count("leader") == 1
                and listed.get(paused_master) == "standby"
            )

        eventually(one_leader_and_the_paused_one_stands_by)
        assert _leader(c, cluster)[1] > term
        assert c.stat(changed).is_dir


def test_a_frozen_leader_leaves_ls_stat_cp_and_load_working_and_wakes_up_fenced(
    healed: LocalCluster, tmp_path: Path
) -> None:
    cluster, run = healed, uuid.uuid4().hex[:8]
    files = _files(cluster, f"frozen-{run}", 3, 1000)
    root = f"/m/frozen-{run}"
    with Client(cluster.master_address) as c:
        c.mount(
            root,
            f"s3://{BUCKET}/frozen-{run}/",
            endpoint_url=cluster.s3_endpoint,
            block_size=BLOCK,
            writable=True,
        )
        frozen, term = _leader(c, cluster)
    frozen_port = cluster.processes[frozen].port
    checkpoint = tmp_path / "step.bin"
    checkpoint.write_bytes(os.urandom(200_000))
    # Each CLI call gets 5 s: one that waited on the frozen leader would run out of it.
    env = {**os.environ, "RESERVOIR_RPC_TIMEOUT": "5", "RESERVOIR_MASTER_PROBE_TIMEOUT": "1"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "reservoir.cli.main", "--master", cluster.master_address]
        done = subprocess.run(
            [*command, *args], capture_output=True, text=True, timeout=60, env=env
        )
        assert done.returncode == 0, f"{args}: {done.stderr}"
        return done

    logged_before = len(_log_events(cluster, frozen))
    os.kill(cluster.processes[frozen].pid, signal.SIGSTOP)
    jobs = []
    for step in (1, 2):  # at once after the stop, and again while it stays frozen
        listed = cli("ls", root).stdout
        assert all(name in listed for name in files)
        assert cli("stat", f"{root}/f000").returncode == 0
        cli("cp", str(checkpoint), f"{root}/out/step-{step}.bin")
        jobs.append(json.loads(cli("--json", "load", root).stdout)["id"])
    with Client(cluster.master_address) as c:  # the new leader runs the jobs meanwhile
        assert [c.watch_job(job).state for job in jobs] == ["completed", "completed"]
    # A change the frozen master will find waiting when it wakes.
    stale = master_pb2.MountRequest(
        path=f"/m/stale-{run}",
        uri=f"s3://{BUCKET}/frozen-{run}/",
        options=common_pb2.MountOptions(endpoint_url=cluster.s3_endpoint),
    )
    earlier = _connections_to(frozen_port)
    with channel(f"127.0.0.1:{frozen_port}") as ch:
        pending = master_pb2_grpc.MasterServiceStub(ch).Mount.future(stale, timeout=30)
        eventually(
            lambda: any(
                queued > earlier.get(peer, 0)
                for peer, queued in _connections_to(frozen_port).items()
            ),
            what="the call waiting in the frozen master's socket",
        )
        os.kill(cluster.processes[frozen].pid, signal.SIGCONT)
        with pytest.raises(grpc.RpcError) as refused:
            pending.result()
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    with Client(cluster.master_address) as c:
        leader, new_term = _leader(c, cluster)
        assert leader != frozen and new_term > term
        leader_address = f"127.0.0.1:{cluster.processes[leader].port}"

        def woken_names_the_new_leader() -> bool:
            with channel(f"127.0.0.1:{frozen_port}") as ch:
                try:
                    master_pb2_grpc.MasterServiceStub(ch).ListMounts(
                        master_pb2.ListMountsRequest(), timeout=5
                    )
                except grpc.RpcError as exc:
                    named = dict(exc.trailing_metadata() or ()).get(errors.LEADER_KEY)
                    return exc.code() == grpc.StatusCode.UNAVAILABLE and named == leader_address
            return False

        eventually(woken_names_the_new_leader)
        roles = [m.role for m in c.masters()]
        assert roles.count("leader") == 1 and len(roles) == len(cluster.master_names())
        assert f"/m/stale-{run}" not in {m.path for m in c.mounts()}
        for step in (1, 2):
            assert c.read(f"{root}/out/step-{step}.bin") == checkpoint.read_bytes()
    # The woken master stepped down, and nothing it logged since the stop is a change.
    since = [json.loads(line).get("event", "") for line in _log_events(cluster, frozen)]
    since = since[logged_before:]
    assert "leadership_stepping_down" in since
    changes = ("write_", "load_job_", "directory_", "file_", "pinned", "unmounted")
    assert [event for event in since if event.startswith(changes)] == []


def test_a_standby_names_the_leader_to_a_caller_that_knows_only_the_standby(
    healed: LocalCluster,
) -> None:
    cluster = healed
    with Client(cluster.master_address) as c:
        leader, _ = _leader(c, cluster)
    standby = next(n for n in cluster.master_names() if n != leader)
    address = f"127.0.0.1:{cluster.processes[standby].port}"

    def refusal() -> grpc.RpcError | str | None:
        """The standby's answer, once it knows the leader (a master that just stood down
        reads who leads when it campaigns again); a reply instead is final, and wrong."""
        with channel(address) as ch:
            try:
                master_pb2_grpc.MasterServiceStub(ch).ListMounts(
                    master_pb2.ListMountsRequest(), timeout=5
                )
            except grpc.RpcError as exc:
                return exc if errors.LEADER_KEY in dict(exc.trailing_metadata() or ()) else None
        return f"the standby at {address} answered a call that needs the leader"

    refused = eventually(refusal)
    assert isinstance(refused, grpc.RpcError), refused
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    trailing = dict(refused.trailing_metadata() or ())
    assert trailing[errors.LEADER_KEY] == f"127.0.0.1:{cluster.processes[leader].port}"
    # The client goes there by itself.
    with Client(address) as c:
        assert c.ls("/") is not None


def test_masters_command_and_local_status_name_the_one_leader(healed: LocalCluster) -> None:
    cluster = healed
    cli = [sys.executable, "-m", "reservoir.cli.main"]
    listed = subprocess.run(
        [*cli, "--master", cluster.master_address, "masters", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    masters = json.loads(listed.stdout)
    ports = {f"127.0.0.1:{cluster.processes[n].port}" for n in cluster.master_names()}
    assert {m["address"] for m in masters} == ports
    assert [m["role"] for m in masters] == ["leader", "standby", "standby"]
    assert masters[0]["term"] >= 1
    assert datetime.fromisoformat(masters[0]["since"]).tzinfo is not None
    status = subprocess.run(
        [*cli, "--state-dir", str(cluster.state_dir), "local", "status", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=own_cluster_env(),
    )
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    assert document["master"] == cluster.master_address
    roles = {
        name: p["role"] for name, p in document["processes"].items() if name.startswith("master")
    }
    assert sorted(roles.values()) == ["leader", "standby", "standby"]
    # A standby is healthy: it serves, it just does not lead.
    health = subprocess.run(
        [*cli, "health", masters[1]["address"]], capture_output=True, text=True, timeout=60
    )
    assert health.returncode == 0, health.stderr
    assert health.stdout.strip() == "SERVING"
    leader_port = masters[0]["address"].rpartition(":")[2]
    (leading,) = [n for n, r in roles.items() if r == "leader"]
    assert str(document["processes"][leading]["port"]) == leader_port


def _connections_to(port: int) -> dict[str, int]:
    """Established TCP connections whose local end is `port`: each peer's address (hex, as
    /proc/net/tcp{,6} has it) and the bytes received and not yet read. gRPC servers listen
    on IPv6 sockets, where IPv4 peers show as mapped addresses."""
    found: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, peer, state, queues = fields[1], fields[2], fields[3], fields[4]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                found[peer] = int(queues.split(":")[1], 16)
    return found
