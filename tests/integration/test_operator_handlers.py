"""The operator's handlers, called as Kopf calls them (a resource body as the API server
sends it) against a real cluster: create declares the dataset and reports its status,
an update reconciles only a changed spec, the timer brings back a dataset the cluster
lost, and delete releases the finalizer — confirmed with the master up, within its
budget with the master unreachable or silent."""

from __future__ import annotations

import dataclasses
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from reservoir.client import Client
from reservoir.common import config as cfg
from reservoir.common.errors import NotFound
from reservoir.local.cluster import LocalCluster
from reservoir.operator import dataset_handlers as handlers
from reservoir.operator.bounded_calls import Budget
from reservoir.operator.kopf_wiring import finalizer_budget, operator_client

pytestmark = pytest.mark.integration

FINALIZER_LIMIT_S = 60.0  # what the issue allows a deletion with the master gone


def _resource(cluster: LocalCluster, bucket: str, name: str, **spec: Any) -> dict[str, Any]:
    """A Dataset object as the API server hands it to a handler: Kubernetes' metadata,
    a finalizer, a status of its own."""
    return {
        "apiVersion": "reservoir.io/v1alpha1",
        "kind": "Dataset",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": str(uuid.uuid4()),
            "resourceVersion": "4711",
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["reservoir.io/dataset"],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
        },
        "spec": {
            "source": {"uri": f"s3://{bucket}/data/", "endpointUrl": cluster.s3_endpoint},
            "path": f"/datasets/{name}",
            **spec,
        },
        "status": {"phase": "Whatever", "kopf": {"progress": {}}},
    }


@pytest.fixture
def filled_bucket(cluster: LocalCluster, bucket: str) -> str:
    s3 = cluster.s3_client()
    for i in range(4):
        s3.put_object(Bucket=bucket, Key=f"data/f{i}", Body=bytes([i]) * 4096)
    return bucket


def _until(check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.2)


def test_create_declares_the_dataset_and_reports_its_status_in_kubernetes_spelling(
    cluster: LocalCluster, client: Client, filled_bucket: str
) -> None:
    name = f"op-{uuid.uuid4().hex[:8]}"
    body = _resource(cluster, filled_bucket, name, preload={"policy": "Once"})
    status = handlers.apply(body, client)
    assert status["observedGeneration"] == 1
    assert status["path"] == f"/datasets/{name}"
    declared = client.dataset(name)
    assert declared.document["spec"]["source"]["uri"] == f"s3://{filled_bucket}/data/"
    # Later passes (the timer) see it mounted, loaded and cached.
    final = _until(lambda: (s := handlers.refresh(body, client))["ready"] and s)
    assert final["phase"] == "Ready" and final["cachedPercent"] == 100.0
    assert final["files"] == 4 and final["cachedBytes"] == 4 * 4096
    reconciled = {c["type"]: c for c in final["conditions"]}["Reconciled"]
    assert reconciled["status"] == "True" and reconciled["lastTransitionTime"].endswith("Z")
    handlers.release(body, client, Budget(10, 2, 0.1, 1))


def test_an_update_reconciles_a_changed_spec_and_a_repeated_one_changes_nothing(
    cluster: LocalCluster, client: Client, filled_bucket: str
) -> None:
    name = f"op-{uuid.uuid4().hex[:8]}"
    body = _resource(cluster, filled_bucket, name)
    handlers.apply(body, client)
    first = client.dataset(name)
    handlers.apply({**body, "metadata": {**body["metadata"], "resourceVersion": "4712"}}, client)
    assert client.dataset(name).generation == first.generation
    changed = {**body, "spec": {**body["spec"], "cache": {"pin": True}}}
    changed["metadata"] = {**body["metadata"], "generation": 2}
    status = handlers.apply(changed, client)
    after = client.dataset(name)
    assert after.generation == first.generation + 1
    assert after.document["spec"]["cache"]["pin"] is True
    assert status["observedGeneration"] == 2
    handlers.release(changed, client, Budget(10, 2, 0.1, 1))


def test_the_timer_declares_again_a_dataset_the_cluster_lost(
    cluster: LocalCluster, client: Client, filled_bucket: str
) -> None:
    name = f"op-{uuid.uuid4().hex[:8]}"
    body = _resource(cluster, filled_bucket, name)
    handlers.apply(body, client)
    client.delete_dataset(name)
    _until(lambda: name not in {d.name for d in client.datasets()})
    status = handlers.refresh(body, client)
    assert status["path"] == f"/datasets/{name}"
    assert client.dataset(name).name == name
    handlers.release(body, client, Budget(10, 2, 0.1, 1))


def test_delete_with_the_master_up_is_confirmed_and_the_dataset_goes(
    cluster: LocalCluster, client: Client, filled_bucket: str
) -> None:
    name = f"op-{uuid.uuid4().hex[:8]}"
    body = _resource(cluster, filled_bucket, name)
    handlers.apply(body, client)
    released = handlers.release(body, client, Budget(10, 2, 0.1, 1))
    assert released.confirmed and released.reason == "deleted by the cluster"

    def gone() -> bool:
        try:
            client.dataset(name)
        except NotFound:
            return True
        return False

    _until(gone)
    again = handlers.release(body, client, Budget(10, 2, 0.1, 1))
    assert again.confirmed and again.reason == "not in the cluster"


@pytest.fixture
def silent_master() -> Iterator[str]:
    """A master that accepts connections and never says a word (hung, or a black hole)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("master", ["closed", "silent"])
def test_delete_with_the_master_gone_releases_the_finalizer_within_its_budget(
    cluster: LocalCluster, filled_bucket: str, silent_master: str, master: str
) -> None:
    address = silent_master if master == "silent" else _closed_port()
    config = cfg.OperatorConfig(
        finalizer_budget_s=4.0,
        call_timeout_s=1.0,
        retry_backoff_s=0.2,
        retry_backoff_max_s=1.0,
        client=dataclasses.replace(cluster.client_config(), master=address),
    )
    body = _resource(cluster, filled_bucket, "gone-master")
    with operator_client(config) as client:
        started = time.monotonic()
        released = handlers.release(body, client, finalizer_budget(config))
        took = time.monotonic() - started
    assert not released.confirmed and released.tries >= 2
    assert "may still hold dataset gone-master" in released.reason
    assert took < FINALIZER_LIMIT_S
