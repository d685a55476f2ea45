"""The worker's wire names (reservoir.common.worker_methods) are the proto's: every method
of WorkerService, spelled as gRPC calls it, and nothing else."""

from __future__ import annotations

from reservoir.common import worker_methods
from reservoir.v1 import worker_pb2


def test_the_worker_method_paths_are_exactly_the_protos_methods() -> None:
    service = worker_pb2.DESCRIPTOR.services_by_name["WorkerService"]
    assert service.full_name == worker_methods.SERVICE
    proto = {f"/{service.full_name}/{m.name}" for m in service.methods}
    named = {
        getattr(worker_methods, n)
        for n in dir(worker_methods)
        if n.isupper() and not n.endswith("_NAME") and n not in ("SERVICE", "READS")
    }
    assert named == proto
    assert set(worker_methods.READS) <= proto
