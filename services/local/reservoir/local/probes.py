"""What the launcher asks a local cluster's processes: whether each serves yet, whether a
worker has registered, which master leads. Each probe answers once (an unanswered call
raises and the caller, Supervisor.wait_ready, asks again)."""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reservoir.common.rpc import CHANNEL_OPTIONS
from reservoir.common.security import Transport

from .etcd_members import is_member
from .gateway_keys import GATEWAY, gateway_answers
from .pki import LocalCredentials
from .process import Process
from .server_processes import is_master

if TYPE_CHECKING:
    from .cluster import LocalCluster


def ready_check(cluster: LocalCluster, proc: Process) -> Callable[[], bool]:
    """Whether `proc` serves: etcd healthy, S3 answering, the master's gRPC serving, a
    worker's serving and registered with the master. The cluster is read at each call
    (a worker started with the masters' addresses known by then)."""
    if is_member(proc.name):
        return lambda: etcd_healthy(proc.port, cluster.credentials)
    if proc.name == "s3":
        return lambda: http_ok(f"http://127.0.0.1:{proc.port}/_reservoir/stats")
    if proc.name == GATEWAY:
        return lambda: gateway_answers(cluster.gateway_url, cluster.credentials)
    address = f"127.0.0.1:{proc.port}"
    if is_master(proc.name):
        return lambda: grpc_serving(address, reader_transport(cluster))
    return lambda: (
        grpc_serving(address, reader_transport(cluster))
        and worker_registered(cluster.master_address, reader_transport(cluster), proc.name)
    )


def reader_transport(cluster: LocalCluster) -> Transport:
    """How a probe reaches a server: as a reader (it only asks)."""
    return Transport(cluster.security("reader"), CHANNEL_OPTIONS)


def etcd_healthy(port: int, creds: LocalCredentials | None) -> bool:
    # A member out of space still serves reads (and the deletes that free space): it
    # is up. `reservoir health` asks the master about the alarm instead.
    path = "/health?exclude=NOSPACE"
    if creds is None:
        return http_ok(f"http://127.0.0.1:{port}{path}")
    context = ssl.create_default_context(cafile=str(creds.ca))
    context.load_cert_chain(str(creds.cert), str(creds.key))
    return http_ok(f"https://127.0.0.1:{port}{path}", context)


def _first_answer(master_address: str, transport: Transport, method: str, request: Any) -> Any:
    """The reply of the first master that answers `method` (a standby refuses the calls
    only the leader answers), or None when none does."""
    import grpc

    from reservoir.v1 import master_pb2_grpc

    for address in master_address.split(","):
        with transport.sync_channel(address) as channel:
            try:
                return getattr(master_pb2_grpc.MasterServiceStub(channel), method)(
                    request, timeout=2
                )
            except grpc.RpcError:
                continue
    return None


def worker_registered(master_address: str, transport: Transport, worker_id: str) -> bool:
    """Whether the leading master lists the worker (a standby refuses to say)."""
    from reservoir.v1 import master_pb2

    reply = _first_answer(master_address, transport, "ListWorkers", master_pb2.ListWorkersRequest())
    return reply is not None and any(w.id == worker_id for w in reply.workers)


def worker_states(master_address: str, transport: Transport) -> dict[str, str]:
    """Each registered worker's state by id (serving, draining, drained), as the leading
    master has it (empty when none answers)."""
    from reservoir.v1 import master_pb2

    reply = _first_answer(master_address, transport, "ListWorkers", master_pb2.ListWorkersRequest())
    return {} if reply is None else {w.id: w.state or "serving" for w in reply.workers}


def master_roles(master_address: str, transport: Transport) -> dict[str, str]:
    """Each master's role by address, as the masters record them in etcd (empty when
    none answers)."""
    from reservoir.v1 import master_pb2

    reply = _first_answer(master_address, transport, "ListMasters", master_pb2.ListMastersRequest())
    return {} if reply is None else {m.address: m.role for m in reply.masters}


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, timeout=1, context=context) as r:
        return bool(r.status == 200)


def grpc_serving(address: str, transport: Transport) -> bool:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with transport.sync_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=1
        )
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
