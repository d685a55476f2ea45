"""Metrics and traces of real processes: the master's and a worker's /metrics parse as
Prometheus text and follow reads, `workers -l` and /metrics agree, and a worker's read
spans reach an OTLP/HTTP collector (a real listener in this process) with their read
attributes."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from reservoir.client import Client
from reservoir.common import worker_methods
from reservoir.local.cluster import LocalCluster
from tests.eventually import eventually

from ..conftest import LEASE_TTL_S, own_cluster_env

KiB = 1024
BLOCK = 256 * KiB
WAIT_S = 20.0


@dataclass
class Span:
    service: str
    name: str
    attributes: dict[str, Any]
    start_ns: int


@dataclass
class Collector:
    """An OTLP/HTTP trace receiver: POST /v1/traces with an ExportTraceServiceRequest."""

    server: ThreadingHTTPServer
    spans: list[Span] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            attrs = {a.key: a.value.string_value for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for span in scope.spans:
                    values = {a.key: _value(a.value) for a in span.attributes}
                    with self.lock:
                        self.spans.append(
                            Span(
                                attrs.get("service.name", ""),
                                span.name,
                                values,
                                span.start_time_unix_nano,
                            )
                        )

    def wait_for(self, wanted: Any) -> list[Span]:
        """The received spans that `wanted` accepts, once there are some (or none)."""

        def found() -> list[Span]:
            with self.lock:
                return [s for s in self.spans if wanted(s)]

        try:
            return eventually(found, timeout_s=WAIT_S, interval_s=0.1)
        except AssertionError:
            return []


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


def _collector() -> Collector:
    holder: list[Collector] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            holder[0].receive(body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    collector = Collector(ThreadingHTTPServer(("127.0.0.1", 0), Handler))
    holder.append(collector)
    threading.Thread(target=collector.server.serve_forever, daemon=True).start()
    return collector


@dataclass
class Observed:
    cluster: LocalCluster
    collector: Collector
    files: dict[str, bytes]


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    collector = _collector()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        # Spans leave every 100 ms instead of every 5 s.
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    cluster = LocalCluster.up(
        tmp_path_factory.mktemp("metrics"), workers=1, lease_ttl=LEASE_TTL_S, env=env
    )
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="obs")
        files = {
            "/obs/a.bin": os.urandom(2 * BLOCK + 17),
            "/obs/sub/b.bin": os.urandom(BLOCK),
            "/obs/traced.bin": os.urandom(BLOCK + 1),
        }
        for path, data in files.items():
            s3.put_object(Bucket="obs", Key=f"d/{path[5:]}", Body=data)
        with Client(cluster.master_address) as c:
            c.mount("/obs", "s3://obs/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
        yield Observed(cluster, collector, files)
    finally:
        cluster.down()
        collector.server.shutdown()


# What Prometheus 3 asks for when it scrapes.
OPENMETRICS = "application/openmetrics-text;version=1.0.0;q=0.6,text/plain;version=0.0.4;q=0.3"


def scrape(
    cluster: LocalCluster, name: str, *, openmetrics: bool = False
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a server's /metrics, parsed as Prometheus text (or, asked for as
    Prometheus asks, as gzip-compressed OpenMetrics)."""
    headers = {"Accept": OPENMETRICS, "Accept-Encoding": "gzip"} if openmetrics else {}
    request = urllib.request.Request(cluster.metrics_url(name), headers=headers)
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 200
        body = reply.read()
        kind, encoding = reply.headers["Content-Type"], reply.headers.get("Content-Encoding")
    if openmetrics:
        assert kind.startswith("application/openmetrics-text") and encoding == "gzip"
        families = openmetrics_families(gzip.decompress(body).decode())
    else:
        assert kind.startswith("text/plain") and encoding is None
        families = text_string_to_metric_families(body.decode())
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families
        for s in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_master_and_worker_serve_prometheus_text_on_the_ports_cluster_json_records(
    observed: Observed,
) -> None:
    cluster = observed.cluster
    recorded = json.loads(cluster.file.read_text())["processes"]
    assert recorded["master"]["metrics_port"] > 0 and recorded["worker1"]["metrics_port"] > 0
    status = cluster.status()["processes"]
    assert status["worker1"]["metrics"] == cluster.metrics_url("worker1")

    master = scrape(cluster, "master")
    assert value(master, "reservoir_master_mounts") == 1
    assert value(master, "reservoir_master_workers") == 1
    assert value(master, "reservoir_master_metadata_up") == 1
    assert value(master, "reservoir_master_jobs", state="running") == 0
    listed = value(
        master,
        "grpc_server_handled_total",
        grpc_type="unary",
        grpc_service="reservoir.v1.MasterService",
        grpc_method="ListWorkers",
        grpc_code="OK",
    )
    assert listed >= 1  # `local up` waited for the worker to register
    worker = scrape(cluster, "worker1")
    assert value(worker, "reservoir_worker_info", worker_id="worker1") == 1
    assert value(worker, "reservoir_worker_tier_capacity_bytes", tier="mem", path="") == 1 << 30
    assert value(worker, "process_resident_memory_bytes") > 0
    # Asked for as Prometheus asks: the same series, as gzip-compressed OpenMetrics.
    for name, plain in (("master", master), ("worker1", worker)):
        negotiated = scrape(cluster, name, openmetrics=True)
        assert {k for k in plain if k[0].startswith("reservoir_")} <= set(negotiated), name


def test_worker_counters_follow_reads_by_hit_miss_and_source(observed: Observed) -> None:
    cluster, path = observed.cluster, "/obs/a.bin"
    data = observed.files[path]
    blocks = 3
    with Client(cluster.master_address) as c:
        c.free(path)  # whatever read it before: cold again
        before = scrape(cluster, "worker1")
        assert c.read(path) == data  # cold: every block from S3
        cold = scrape(cluster, "worker1")
        assert c.read(path) == data  # warm: from the worker's memory
    warm = scrape(cluster, "worker1")

    def delta(a: dict[Any, float], b: dict[Any, float], name: str, **labels: str) -> float:
        return value(b, name, **labels) - value(a, name, **labels)

    assert delta(before, cold, "reservoir_worker_misses_total") == blocks
    assert delta(before, cold, "reservoir_worker_ufs_requests_total") == blocks
    assert delta(before, cold, "reservoir_worker_ufs_fetched_bytes_total") == len(data)
    assert delta(before, cold, "reservoir_worker_served_bytes_total", source="ufs") == len(data)
    assert delta(before, cold, "reservoir_worker_hits_total") == 0
    assert delta(cold, warm, "reservoir_worker_hits_total") == blocks
    assert delta(cold, warm, "reservoir_worker_misses_total") == 0
    assert delta(cold, warm, "reservoir_worker_served_bytes_total", source="mem") == len(data)
    assert delta(cold, warm, "reservoir_worker_ufs_requests_total") == 0
    # Each GET of the cold read timed, none of the warm one.
    gets = {"operation": "get", "scheme": "s3", "outcome": "ok"}
    assert delta(before, cold, "reservoir_worker_ufs_request_seconds_count", **gets) == blocks
    assert delta(before, cold, "reservoir_worker_ufs_request_seconds_sum", **gets) > 0
    assert delta(cold, warm, "reservoir_worker_ufs_request_seconds_count", **gets) == 0
    assert delta(before, warm, "reservoir_worker_tier_blocks", tier="mem", path="") == blocks

    def read_calls(scraped: dict[Any, float]) -> float:
        """Timed read requests, over gRPC or the data port."""
        return sum(
            v
            for (name, labels), v in scraped.items()
            if (
                name == "grpc_server_handling_seconds_count"
                and dict(labels).get("grpc_method", "").startswith("Read")
            )
            or name == "reservoir_worker_data_port_request_seconds_count"
        )

    # A call is timed when its handler returns, which can be just after the client has
    # its last byte: the second pass's call may land in the histogram a moment later.
    eventually(
        lambda: read_calls(scrape(cluster, "worker1")) - read_calls(before) >= 2,
        what="a read call per pass, each timed",
    )


def test_failed_s3_gets_count_as_under_store_errors(observed: Observed) -> None:
    cluster, path = observed.cluster, "/obs/sub/b.bin"
    with Client(config=cluster.client_config(ufs_fallback=False)) as c:
        c.free(path)
        before = scrape(cluster, "worker1")
        cluster.s3_config(fail_gets=1000)  # S3 answers every GET with 503 SlowDown
        try:
            with pytest.raises(ConnectionError):
                c.read(path)
        finally:
            cluster.s3_config(fail_gets=0)

    def count(metrics: Any, name: str) -> float:
        return value(metrics, name) - value(before, name)

    def settled() -> Any:
        # A fetch outlives a reader that gave up on it (its deadline passed while S3 was
        # retried): its GET is counted when it starts and its failure when it ends, so
        # the two agree once every fetch the read started has ended.
        metrics = scrape(cluster, "worker1")
        errors = count(metrics, "reservoir_worker_ufs_errors_total")
        requests = count(metrics, "reservoir_worker_ufs_requests_total")
        return metrics if errors >= 1 and requests == errors else None

    after = eventually(settled, what="every GET worker1 started counted as an error")
    errors = count(after, "reservoir_worker_ufs_errors_total")
    # Throttled (S3's 503 SlowDown): the outcome names it, so an operator tells a store
    # that pushes back from one that is down.
    failed_gets = value(
        after,
        "reservoir_worker_ufs_request_seconds_count",
        operation="get",
        scheme="s3",
        outcome="slow_down",
    ) - value(
        before,
        "reservoir_worker_ufs_request_seconds_count",
        operation="get",
        scheme="s3",
        outcome="slow_down",
    )
    assert failed_gets == errors
    assert value(after, "reservoir_worker_served_bytes_total", source="ufs") == value(
        before, "reservoir_worker_served_bytes_total", source="ufs"
    )


def test_workers_l_and_metrics_read_the_same_counters(observed: Observed) -> None:
    cluster = observed.cluster
    with Client(cluster.master_address) as c:
        c.read("/obs/sub/b.bin")
    cli = [sys.executable, "-m", "reservoir.cli.main", "--state-dir", str(cluster.state_dir)]
    done = subprocess.run(
        [*cli, "--json", "workers", "-l"],
        env=own_cluster_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (listed,) = json.loads(done.stdout)
    samples = scrape(cluster, "worker1")  # nothing read in between
    assert listed["hits"] + listed["misses"] > 0
    for key, metric in (
        ("hits", "reservoir_worker_hits_total"),
        ("misses", "reservoir_worker_misses_total"),
        ("evictions", "reservoir_worker_evictions_total"),
        ("corrupt_blocks", "reservoir_worker_corrupt_blocks_total"),
        ("ufs_gets", "reservoir_worker_ufs_requests_total"),
        ("ufs_errors", "reservoir_worker_ufs_errors_total"),
        ("bytes_from_ufs", "reservoir_worker_ufs_fetched_bytes_total"),
    ):
        assert listed[key] == value(samples, metric), key
    for source, n in listed["bytes_served"].items():
        assert n == value(samples, "reservoir_worker_served_bytes_total", source=source), source
    for tier in listed["tiers"]:
        where = {"tier": tier["name"], "path": tier["path"]}
        assert tier["blocks"] == value(samples, "reservoir_worker_tier_blocks", **where)
        assert tier["used_bytes"] == value(samples, "reservoir_worker_tier_used_bytes", **where)
        assert tier["hits"] == value(samples, "reservoir_worker_tier_hits_total", **where)


def test_master_metrics_count_namespace_chunks_and_load_jobs(observed: Observed) -> None:
    cluster = observed.cluster
    before = scrape(cluster, "master")
    with Client(cluster.master_address) as c:
        c.refresh("/obs/sub/b.bin")  # a HEAD of the object, whatever the master knew
        c.load_metadata("/obs")
        final = c.watch_job(c.submit_load("/obs").id)
        assert final.state == "completed", final.errors
    master = scrape(cluster, "master")

    def delta(name: str, **labels: str) -> float:
        return value(master, name, **labels) - value(before, name, **labels)

    # The master's own requests to S3, timed: HEADs and LISTs (the mount's check too).
    timed = "reservoir_master_ufs_request_seconds_count"
    assert delta(timed, operation="head", scheme="s3", outcome="ok") >= 1
    assert value(master, timed, operation="list", scheme="s3", outcome="ok") >= 1
    assert value(master, timed, operation="check", scheme="s3", outcome="ok") == 1
    # What the job moved: every block of every file, once (one replica).
    sizes = [len(data) for data in observed.files.values()]
    assert delta("reservoir_master_load_job_bytes_total", outcome="loaded") == sum(sizes)
    blocks = sum(-(-size // BLOCK) for size in sizes)
    assert delta("reservoir_master_load_job_blocks_total", outcome="loaded") == blocks
    assert delta("reservoir_master_load_job_blocks_total", outcome="failed") == 0
    # The mount point's entry, and its children (its two files and the directory
    # between them): two directories, so two chunks at least.
    assert value(master, "reservoir_master_namespace_chunks") >= 2
    assert value(master, "reservoir_master_jobs", state="completed") >= 1
    assert value(master, "reservoir_master_jobs", state="running") == 0


def test_master_metrics_count_the_namespaces_files_and_directories(observed: Observed) -> None:
    cluster = observed.cluster
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket="counted")
    # 7 files in 4 directories (a, a/b, c, and the mount's own).
    for key in ("x.bin", "a/1", "a/2", "a/b/3", "a/b/4", "c/5", "c/6"):
        s3.put_object(Bucket="counted", Key=f"p/{key}", Body=b"x")

    def counts() -> tuple[float, float]:
        samples = scrape(cluster, "master")
        assert ("reservoir_master_namespace_files", ()) in samples  # counted, not absent
        return (
            value(samples, "reservoir_master_namespace_files"),
            value(samples, "reservoir_master_namespace_directories"),
        )

    files, directories = counts()
    with Client(cluster.master_address) as c:
        c.mount("/counted", "s3://counted/p/", endpoint_url=cluster.s3_endpoint)
        c.load_metadata("/counted")
        assert counts() == (files + 7, directories + 4)
        c.unmount("/counted")
    assert counts() == (files, directories)


def test_read_spans_reach_an_otlp_collector_with_worker_hit_miss_and_bytes(
    observed: Observed,
) -> None:
    cluster, collector = observed.cluster, observed.collector
    path = "/obs/traced.bin"
    with Client(cluster.master_address) as c:
        c.free(path)
        since = time.time_ns()  # spans of earlier reads may still be on their way
        assert c.read(path) == observed.files[path]  # a miss per block
        assert c.read(path) == observed.files[path]  # a hit per block

    def reads(cache: str) -> list[Span]:
        return collector.wait_for(
            lambda s: (
                s.service == "reservoir-worker"
                and s.start_ns >= since
                and s.name in worker_methods.READS
                and s.attributes.get("reservoir.cache") == cache
            )
        )

    for cache, source in (("miss", "ufs"), ("hit", "mem")):
        spans = reads(cache)
        assert spans, f"no {cache} among the {len(collector.spans)} spans received"
        for span in spans:
            assert span.attributes["reservoir.worker"] == "worker1"
            assert span.attributes["reservoir.source"] == source
            assert span.attributes["reservoir.bytes"] > 0
    # The worker exports spans in batches: the second block's span may come in a later one.
    eventually(
        lambda: sum(s.attributes["reservoir.bytes"] for s in reads("hit")) == BLOCK + 1,
        timeout_s=WAIT_S,
        what="hit spans covering the whole file",
    )
    # Each miss's GET has a span of its own, naming the object.
    gets = collector.wait_for(lambda s: s.name == "ufs_get" and s.start_ns >= since)
    assert gets and all(g.attributes["reservoir.ufs_uri"] == "s3://obs/d/traced.bin" for g in gets)
