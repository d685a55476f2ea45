"""Workers leaving and joining with real processes: a drain moves a worker's blocks to their
next homes while reads go on (no read fails, none sees wrong bytes, and the data set is
read afterwards without S3); SIGTERM drains a worker before it exits; a worker that joins
is filled with its share from the other workers, not from S3."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.common.errors import InvalidArgument, NotFound
from reservoir.common.placement import block_key, placement_of
from reservoir.local.cluster import LocalCluster

from ..conftest import LEASE_TTL_S

pytestmark = pytest.mark.integration

KiB = 1024
BLOCK = 256 * KiB
FILES = 24  # x 2 blocks


def _gets(cluster: LocalCluster) -> int:
    return cluster.s3_counts().get("GET", 0)


def _cluster(tmp: Path, workers: int, **env: str) -> LocalCluster:
    return LocalCluster.up(tmp, workers=workers, lease_ttl=LEASE_TTL_S, env=env or None)


def _data_set(cluster: LocalCluster, client: Client) -> dict[str, bytes]:
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket="moves")
    files = {f"/moves/f{i:02d}": os.urandom(2 * BLOCK - i) for i in range(FILES)}
    for path, data in files.items():
        s3.put_object(Bucket="moves", Key=f"d/{path[7:]}", Body=data)
    client.mount("/moves", "s3://moves/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
    job = client.submit_load("/moves")
    assert client.watch_job(job.id).succeeded
    return files


def _read_all(client: Client, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        with client.open(path) as f:
            assert f.read() == data, path


def _blocks_held(client: Client) -> dict[str, int]:
    return {s.worker_id: s.blocks for s in client.worker_stats()}


@pytest.fixture
def three(tmp_path: Path) -> Iterator[LocalCluster]:
    c = _cluster(tmp_path / "c", workers=3, RESERVOIR_WORKER_DRAIN_TIMEOUT="30")
    try:
        yield c
    finally:
        c.down()


class _Readers:
    """Threads reading the data set in a loop, counting reads and failures."""

    def __init__(self, cluster: LocalCluster, files: dict[str, bytes], threads: int) -> None:
        self._files = files
        self._stop = threading.Event()
        self.reads = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._client = Client(cluster.master_address)
        self._threads = [threading.Thread(target=self._loop, args=(n,)) for n in range(threads)]

    def _loop(self, n: int) -> None:
        paths = list(self._files)
        i = n
        while not self._stop.is_set():
            path = paths[i % len(paths)]
            i += 3
            try:
                with self._client.open(path) as f:
                    ok = f.read() == self._files[path]
            except Exception as exc:
                with self._lock:
                    self.failures.append(f"{path}: {type(exc).__name__}: {exc}")
                continue
            with self._lock:
                self.reads += 1
                if not ok:
                    self.failures.append(f"{path}: wrong bytes")

    def __enter__(self) -> _Readers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)
        self._client.close()


def test_a_drain_under_reads_moves_the_workers_blocks_and_no_read_fails(
    three: LocalCluster,
) -> None:
    with Client(three.master_address) as client:
        files = _data_set(three, client)
        held = _blocks_held(client)
        assert held["worker2"] > 0
        with _Readers(three, files, threads=4) as readers:
            time.sleep(0.5)
            job = client.drain("worker2", wait=True)
            time.sleep(0.5)
        assert readers.failures == []
        assert readers.reads > 0
        assert job.succeeded, job.errors
        assert job.kind == "drain" and job.worker == "worker2"
        assert job.done_blocks == held["worker2"]
        states = {w.id: w.state for w in client.workers()}
        assert states == {"worker1": "serving", "worker2": "drained", "worker3": "serving"}
        assert client.job(job.id).state == "completed"  # `reservoir job show` has it

        # The drained worker may stop: the data set is still read without S3.
        three.stop("worker2")
        before = _gets(three)
        with Client(three.master_address) as fresh:
            _read_all(fresh, files)
        assert _gets(three) - before == 0


def test_a_drained_worker_takes_no_new_blocks_and_undrain_puts_it_back(
    three: LocalCluster,
) -> None:
    with Client(three.master_address) as client:
        files = _data_set(three, client)
        assert client.drain("worker1", wait=True).succeeded
        # A load now puts nothing on the drained worker.
        client.free("/moves")
        before = _blocks_held(client)["worker1"]
        assert client.watch_job(client.submit_load("/moves").id).succeeded
        assert _blocks_held(client)["worker1"] == before
        client.undrain("worker1")
        assert {w.id: w.state for w in client.workers()}["worker1"] == "serving"
        with pytest.raises(NotFound):
            client.undrain("worker1")  # serving, and no drain of it running
        _read_all(client, files)


def test_draining_the_last_serving_worker_is_refused(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path / "c", workers=1)
    try:
        with Client(cluster.master_address) as client:
            with pytest.raises(InvalidArgument, match="no other serving worker"):
                client.drain("worker1")
            with pytest.raises(NotFound):
                client.drain("worker9")
    finally:
        cluster.down()


def test_sigterm_drains_a_worker_before_it_exits(three: LocalCluster) -> None:
    with Client(three.master_address) as client:
        files = _data_set(three, client)
        held = _blocks_held(client)["worker3"]
        three.stop("worker3", timeout_s=60)
        drains = [j for j in client.jobs() if j.kind == "drain" and j.worker == "worker3"]
        assert [j.state for j in drains] == ["completed"]
        assert drains[0].done_blocks == held
        before = _gets(three)
        with Client(three.master_address) as fresh:
            _read_all(fresh, files)
        assert _gets(three) - before == 0


def test_a_worker_that_joins_is_filled_from_its_peers_not_from_s3(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path / "c", workers=2)
    try:
        with Client(cluster.master_address) as client:
            files = _data_set(cluster, client)
            total = sum(_blocks_held(client).values())
            gets = _gets(cluster)
            cluster.start_worker(3)
            deadline = time.monotonic() + 30
            fills: list = []
            while time.monotonic() < deadline:
                fills = [j for j in client.jobs() if j.kind == "fill" and j.worker == "worker3"]
                if fills and fills[0].finished:
                    break
                time.sleep(0.2)
            assert [j.state for j in fills] == ["completed"]
            # Exactly the blocks it is now home of (about a third of them): placement says which.
            table = placement_of(client.workers())
            homed = sum(
                table.homes(block_key(i.file_id, n))[0] == "worker3"
                for i in client.stat_many(list(files))
                for n in range(i.block_count)
            )
            assert 0 < homed < total
            assert _blocks_held(client)["worker3"] == homed
            with Client(cluster.master_address) as fresh:
                _read_all(fresh, files)
            assert _gets(cluster) == gets  # the fill and the reads: not one GET
    finally:
        cluster.down()


def test_replicas_a_dead_worker_held_are_made_again_from_the_copies_left(
    three: LocalCluster,
) -> None:
    with Client(three.master_address) as client:
        files = _data_set(three, client)
        assert client.watch_job(client.submit_load("/moves", replicas=2).id).succeeded

        def copies() -> list[int]:
            counts = []
            for path in files:
                located = client.stat(path, with_locations=True).locations
                counts += [len(set(located.get(i, ())) - {"worker2"}) for i in range(2)]
            return counts

        assert min(copies()) >= 1
        three.kill("worker2")  # no drain: its lease runs out
        deadline = time.monotonic() + 10 * LEASE_TTL_S
        repairs: list = []
        while time.monotonic() < deadline:
            repairs = [j for j in client.jobs() if j.kind == "repair" and j.worker == "worker2"]
            if repairs and repairs[0].finished:
                break
            time.sleep(0.2)
        assert [j.state for j in repairs] == ["completed"], repairs
        assert repairs[0].done_blocks > 0
        assert min(copies()) == 2  # every block on two live workers again
        gets = _gets(three)
        _read_all(client, files)
        assert _gets(three) == gets


def test_locality_agrees_with_the_location_table_after_a_load_and_after_a_drain(
    tmp_path: Path,
) -> None:
    from reservoir.local.worker_changes import add_worker
    from reservoir.local.worker_roster import WorkerOptions

    cluster = LocalCluster.up(tmp_path / "c", workers=0, lease_ttl=LEASE_TTL_S)
    try:
        for host in ("h1", "h2", "h3"):
            add_worker(cluster, WorkerOptions(host=host))
        with Client(cluster.master_address) as client:
            _data_set(cluster, client)

            def agree() -> None:
                host_of = {w.id: w.host for w in client.workers()}
                table: dict[str, int] = {}
                for e in client.ls("/moves", with_locations=True):
                    for index, holders in e.locations.items():
                        length = min(e.block_size, e.size - index * e.block_size)
                        for host in {host_of[w] for w in holders}:
                            table[host] = table.get(host, 0) + length
                tally = {h.host: h.bytes for h in client.locality("/moves").hosts if h.bytes}
                assert tally == table

            agree()
            assert client.drain("worker2", wait=True).succeeded
            agree()  # the drained worker's host still holds its copies, and so do the new homes
    finally:
        cluster.down()
