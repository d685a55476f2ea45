"""A `--secure` cluster: TLS on every hop, each role's allowed and refused calls, forged
block reports refused, and no secret in any log line even at debug level."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from reservoir.client import Client
from reservoir.client.data_port import DataPortReader
from reservoir.client.hedges import Hedges
from reservoir.client.penalty_box import PenaltyBox
from reservoir.common.config import SecuritySettings
from reservoir.common.models import WorkerRecord
from reservoir.common.rpc import CHANNEL_OPTIONS
from reservoir.common.security import Transport
from reservoir.local.cluster import LocalCluster
from reservoir.v1 import common_pb2, master_pb2, master_pb2_grpc
from tests.eventually import eventually
from tests.integration.data_port_relay import DataPortRelay

BLOCK = 64 * 1024


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(
        tmp_path_factory.mktemp("secure"),
        workers=2,
        lease_ttl=3,
        secure=True,
        env={"RESERVOIR_LOG_LEVEL": "debug", "RESERVOIR_LOG_THIRD_PARTY_LEVEL": "debug"},
    )
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="sec")
        s3.put_object(Bucket="sec", Key="d/a.bin", Body=os.urandom(3 * BLOCK + 5))
        with Client(config=cluster.client_config("admin")) as c:
            c.mount("/sec", "s3://sec/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
        yield cluster
    finally:
        cluster.down()


def _client(cluster: LocalCluster, role: str | None) -> Client:
    if role is None:  # TLS, but no token
        creds = cluster.credentials
        assert creds is not None
        settings = SecuritySettings(tls_ca=str(creds.ca))
    else:
        settings = cluster.security(role)
    return Client(config=cluster.client_config(role or "admin", security=settings))


def _outcome(call: object) -> str:
    try:
        call()  # type: ignore[operator]
    except PermissionError as exc:
        return "unauthenticated" if type(exc).__name__ == "Unauthenticated" else "denied"
    return "ok"


def test_each_role_may_make_its_calls_and_no_others(secure: LocalCluster) -> None:
    def calls(c: Client) -> dict[str, object]:
        return {
            "ls": lambda: c.ls("/sec"),
            "read": lambda: c.read("/sec/a.bin"),
            "report": lambda: c.report("/sec"),
            "jobs": lambda: c.jobs(),
            "worker_stats": lambda: c.worker_stats(),
            "mount": lambda: c.mount("/other", "s3://sec/d/", endpoint_url=secure.s3_endpoint),
            "load": lambda: c.watch_job(c.submit_load("/sec").id),
            "unmount": lambda: c.unmount("/other"),
        }

    seen: dict[str, dict[str, str]] = {}
    for role in ("reader", "admin", None):
        with _client(secure, role) as c:
            seen[str(role)] = {name: _outcome(call) for name, call in calls(c).items()}
    reads = ("ls", "read", "report", "jobs", "worker_stats")
    writes = ("mount", "load", "unmount")
    assert seen["admin"] == dict.fromkeys(reads + writes, "ok")
    assert seen["reader"] == dict.fromkeys(reads, "ok") | dict.fromkeys(writes, "denied")
    assert set(seen["None"].values()) == {"unauthenticated"}


def test_writing_takes_the_writer_or_admin_role_and_a_reader_sends_nothing_to_s3(
    secure: LocalCluster,
) -> None:
    secure.s3_client().create_bucket(Bucket="secw")
    with _client(secure, "admin") as admin:
        admin.mount("/secw", "s3://secw/", endpoint_url=secure.s3_endpoint, writable=True)
        data = os.urandom(2 * BLOCK + 1)
        with _client(secure, "writer") as writer:
            # Blocks staged and committed on the workers under the writer's token too.
            gets = secure.s3_counts().get("GET", 0)
            writer.write("/secw/by-writer.bin", data)
            assert writer.read("/secw/by-writer.bin") == data
            assert secure.s3_counts().get("GET", 0) == gets
            assert _outcome(lambda: writer.mount("/x", "s3://secw/")) == "denied"
        admin.write("/secw/by-admin.bin", b"admin")
        with _client(secure, "reader") as reader:
            before = secure.s3_counts()
            assert _outcome(lambda: reader.write("/secw/by-reader.bin", b"no")) == "denied"
            assert _outcome(lambda: reader.rm("/secw/by-admin.bin")) == "denied"
            assert secure.s3_counts().get("POST", 0) == before.get("POST", 0)
            assert reader.read("/secw/by-admin.bin") == b"admin"


def _master_stub(cluster: LocalCluster, token: str) -> tuple[grpc.Channel, object]:
    creds = cluster.credentials
    assert creds is not None
    transport = Transport(
        SecuritySettings(tls_ca=str(creds.ca), token_file=str(creds.token(token))),
        CHANNEL_OPTIONS,
    )
    channel = transport.sync_channel(cluster.master_address)
    return channel, master_pb2_grpc.MasterServiceStub(channel)


def test_a_worker_cannot_report_blocks_for_another_worker(secure: LocalCluster) -> None:
    with Client(config=secure.client_config()) as c:
        c.read("/sec/a.bin")

        def located() -> dict[int, list[str]] | None:
            info = c.stat("/sec/a.bin", with_locations=True)
            return info.locations if len(info.locations) == info.block_count else None

        before = eventually(located, what="every block located")  # reports come in batches
    forged = master_pb2.ReportBlocksRequest(
        worker_id="worker2", full=True, added=[common_pb2.BlockRef(file_id="x", index=0)]
    )
    channel, stub = _master_stub(secure, "worker1")
    with channel:
        with pytest.raises(grpc.RpcError) as caught:
            stub.ReportBlocks(forged, timeout=10)  # type: ignore[attr-defined]
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    channel, stub = _master_stub(secure, "reader")
    with channel:
        with pytest.raises(grpc.RpcError) as caught:
            stub.ReportBlocks(forged, timeout=10)  # type: ignore[attr-defined]
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with Client(config=secure.client_config()) as c:
        assert c.stat("/sec/a.bin", with_locations=True).locations == before


def test_a_plaintext_client_gets_no_answer_from_a_tls_master(secure: LocalCluster) -> None:
    with grpc.insecure_channel(secure.master_address) as channel:
        stub = master_pb2_grpc.MasterServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.ListMounts(master_pb2.ListMountsRequest(), timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # no TLS handshake


def test_workers_of_a_tls_cluster_serve_reads_over_their_tls_data_ports(
    secure: LocalCluster,
) -> None:
    # (A plaintext or tokenless connection's refusal: tests/integration/test_data_port.py.)
    with _client(secure, "reader") as c:
        workers = c.workers()
        assert workers and all(w.data_address for w in workers)
        data = c.read("/sec/a.bin")
        assert len(data) == 3 * BLOCK + 5
        assert c.aio.data_port_bytes == len(data)


class _FlippingRelay(DataPortRelay):
    """A relay in front of a data port that keeps what the worker sends and flips one
    byte of it, far past the handshake, on its first connection only."""

    def __init__(self, target: str, flip_at: int) -> None:
        self._flip_at = flip_at
        self.seen = bytearray()  # all the workers sent, as it left them
        self.flipped = 0
        super().__init__(target)

    def answers(self, worker: socket.socket, reader: socket.socket) -> None:
        carried, flip = 0, not self.flipped
        self.flipped += flip
        try:
            while chunk := worker.recv(65536):
                self.seen += chunk
                data = bytearray(chunk)
                if flip and carried <= self._flip_at < carried + len(data):
                    data[self._flip_at - carried] ^= 0x01
                carried += len(data)
                reader.sendall(data)
        except OSError:
            pass
        finally:
            reader.close()


def test_at_privacy_a_changed_byte_is_refused_and_no_block_byte_goes_in_clear(
    secure: LocalCluster,
) -> None:
    with _client(secure, "admin") as admin:
        worker = admin.workers()[0]
        inode = admin.stat("/sec/a.bin")
        data = admin.read("/sec/a.bin")
    assert worker.data_protection == "privacy"
    config = secure.client_config("reader")
    reader = DataPortReader(config, Hedges(config, PenaltyBox(config.worker_penalty_s)))
    relay = _FlippingRelay(worker.data_address, flip_at=BLOCK // 2)  # inside the first block
    via_relay = WorkerRecord(
        worker.id, worker.address, data_address=relay.address, data_protection="privacy"
    )
    try:
        first = memoryview(bytearray(BLOCK))
        assert reader.read_into(via_relay, inode, 0, 0, first).name != "READ"
        assert relay.flipped == 1
        second = memoryview(bytearray(BLOCK))  # a new connection, untouched: read
        assert reader.read_into(via_relay, inode, 1, 0, second).name == "READ"
        assert bytes(second) == data[BLOCK : 2 * BLOCK]
        assert data[BLOCK + 4096 : BLOCK + 4160] not in relay.seen
    finally:
        reader.close()
        relay.close()


def test_no_log_line_carries_a_token_key_or_signature_even_at_debug(
    secure: LocalCluster, tmp_path: Path
) -> None:
    with Client(config=secure.client_config()) as c:
        c.read("/sec/a.bin")
        job = c.submit_load("/sec")
        c.watch_job(job.id)
    creds = secure.credentials
    assert creds is not None
    secrets = [p.read_text().strip() for p in creds.directory.glob("*.token")]
    secrets += [os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_ACCESS_KEY_ID"]]
    logs = {name: Path(p.log).read_text() for name, p in secure.processes.items()}
    # The servers did log at debug, AWS SDK included (so the check means something).
    assert "botocore" in logs["worker1"] + logs["worker2"] + logs["master"]
    for name, text in logs.items():
        for secret in secrets:
            assert secret not in text, f"a secret in {name}'s log"
        assert "Signature=" not in text.replace("Signature=<redacted>", "")


def test_short_circuit_files_are_found_only_through_an_authenticated_call(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster.up(tmp_path / "c", workers=1, lease_ttl=3, secure=True, shm=True)
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="shortc")
        data = os.urandom(2 * BLOCK + 3)
        s3.put_object(Bucket="shortc", Key="d/f", Body=data)
        with Client(config=cluster.client_config("reader", short_circuit=True)) as c:
            with Client(config=cluster.client_config("admin")) as admin:
                admin.mount(
                    "/sc", "s3://shortc/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK
                )
            assert c.read("/sc/f") == data  # the worker fetches and keeps the blocks
            assert c.read("/sc/f") == data  # then this same-host reader reads its files
            assert c.aio.short_circuit_bytes == len(data)
            (worker,) = c.workers()
        root = cluster.shm_root / "worker1"
        # Others may pass through the root but not list it; the files sit under a name
        # that only ListWorkers (a token holder's call) reveals.
        assert root.stat().st_mode & 0o777 == 0o711
        assert Path(worker.shm_dir).parent == root
        assert len(Path(worker.shm_dir).name) == 32
    finally:
        cluster.down()


def test_a_readers_cache_aware_sampler_reads_cached_files_first_and_starts_no_load(
    secure: LocalCluster,
) -> None:
    from reservoir.torch import CacheAwareSampler, ClusterCacheView

    s3 = secure.s3_client()
    for i in range(4):
        s3.put_object(Bucket="sec", Key=f"d/sampled/{i}.bin", Body=bytes([i]) * 100)
    paths = [f"/sec/sampled/{i}.bin" for i in range(4)]
    with _client(secure, "reader") as reader, _client(secure, "admin") as admin:
        jobs_before = len(admin.jobs())
        reader.read(paths[2])
        view = ClusterCacheView(reader)
        # The worker's block report reaches the master.
        eventually(lambda: view.cached(paths)[2], what="the read file reported cached")
        sampler = CacheAwareSampler(paths, cache=view, seed=3)
        order = list(sampler)
        assert order[0] == 2 and sorted(order) == [0, 1, 2, 3]
        # A reader may not start load jobs: the sampler only reorders, and says so once.
        assert view.loads_refused and view.jobs == []
        assert len(admin.jobs()) == jobs_before


def test_the_cli_tells_a_missing_token_a_refused_one_and_a_role_too_weak_apart(
    secure: LocalCluster, tmp_path: Path
) -> None:
    creds = secure.credentials
    assert creds is not None
    secure.s3_client().create_bucket(Bucket="seccli")
    with _client(secure, "admin") as admin:
        admin.mount("/seccli", "s3://seccli/", endpoint_url=secure.s3_endpoint, writable=True)
    mine = ("RESERVOIR_MASTER", "RESERVOIR_TLS_CA", "RESERVOIR_TOKEN", "RESERVOIR_TOKEN_FILE")
    base = {k: v for k, v in os.environ.items() if k not in mine}
    base |= {"RESERVOIR_MASTER": secure.master_address, "RESERVOIR_TLS_CA": str(creds.ca)}
    reader = {**base, "RESERVOIR_TOKEN_FILE": str(creds.token("reader"))}
    local = tmp_path / "local.bin"
    local.write_bytes(b"data")

    def error(env: dict[str, str], *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "reservoir.cli.main", *args],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "StatusCode." not in done.stderr and "Traceback" not in done.stderr
        return done.stderr

    assert "no token given: set RESERVOIR_TOKEN" in error(base, "ls", "/seccli")
    refused = error({**base, "RESERVOIR_TOKEN": "rsv_not-a-token-of-this-cluster"}, "ls", "/")
    assert "the token was refused" in refused
    written = error(reader, "cp", str(local), "reservoir:///seccli/by-reader.bin")
    assert "writing needs the writer role" in written and "BeginWrite" not in written
    mounted = error(reader, "mount", "/seccli2", "s3://seccli/")
    assert "needs the admin role" in mounted and "reader" in mounted
