"""Requests a worker's data port answered, by outcome, and how long each took, for
Prometheus (the data port's counterpart of the gRPC server's `grpc_server_*` series)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from reservoir.common.serving.rpc_metrics import LATENCY_BUCKETS_S


class DataPortMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._handled = Counter(
            "reservoir_worker_data_port_requests",
            "Block requests the data port answered, by status code (OK or the error's).",
            ["code"],
            registry=registry,
        )
        self._seconds = Histogram(
            "reservoir_worker_data_port_request_seconds",
            "Time from a data-port request read to its last byte sent.",
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )

    def answered(self, code: str, seconds: float) -> None:
        self._handled.labels(code).inc()
        self._seconds.observe(seconds)
