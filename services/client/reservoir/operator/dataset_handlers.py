"""What the operator does with a `Dataset` resource, as plain functions of its body (the
object as the API server has it) and a `Client`: Kopf calls them (kopf_wiring.py), tests
call them directly.

A resource becomes the Reservoir dataset of the same name (Reservoir's dataset names are
cluster-wide: two namespaces must not use one name). The document forwarded is the
resource's apiVersion, kind, name and spec, nothing of Kubernetes' own metadata or status;
the master diffs it against what it holds, so an update reconciles only what changed and
a repeated one nothing. Status flows the other way: the cluster's phase, conditions and
cached bytes, in Kubernetes' spelling."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from reservoir.client import Client
from reservoir.client.datasets import Dataset
from reservoir.common import logs
from reservoir.common.dataset_spec import API_VERSION, KIND
from reservoir.common.errors import InvalidArgument, NotFound

from .bounded_calls import Budget, call_within

log = logs.get_logger(__name__)


def document_of(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Reservoir document a resource declares."""
    metadata = body.get("metadata") or {}
    name = metadata.get("name")
    if not name:
        raise InvalidArgument("metadata.name: a Dataset resource without a name")
    return {
        "apiVersion": body.get("apiVersion", API_VERSION),
        "kind": body.get("kind", KIND),
        "metadata": {"name": name},
        "spec": dict(body.get("spec") or {}),
    }


def status_of(dataset: Dataset, generation: int | None = None) -> dict[str, Any]:
    """The resource's status for what the cluster reports of its dataset.
    `generation`: the resource's metadata.generation this status answers."""
    status = dataset.status
    resource: dict[str, Any] = {
        "phase": dataset.phase,
        "cachedPercent": round(dataset.cached_percent, 2),
        "cachedBytes": int(status.get("cached_bytes", 0)),
        "totalBytes": int(status.get("total_bytes", 0)),
        "files": int(status.get("files", 0)),
        "path": dataset.path,
        "ready": dataset.ready,
        "conditions": [_condition(c) for c in status.get("conditions", [])],
    }
    if generation is not None:
        resource["observedGeneration"] = generation
    if status.get("last_sync_ms"):
        resource["lastSyncTime"] = _timestamp(int(status["last_sync_ms"]))
    return resource


def _condition(c: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": str(c.get("type", "")),
        "status": "True" if c.get("status") else "False",
        # Kubernetes wants a reason on every condition: the type stands in for none.
        "reason": str(c.get("reason") or c.get("type", "")),
        "message": str(c.get("message", "")),
        "lastTransitionTime": _timestamp(int(c.get("changed_ms", 0))),
    }


def _timestamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def apply(body: Mapping[str, Any], client: Client) -> dict[str, Any]:
    """Create or update: forwards the resource's document; returns its new status.
    InvalidArgument for a spec the cluster refuses (retrying cannot help); the client's
    errors otherwise."""
    dataset = client.apply_dataset(document_of(body))
    generation = (body.get("metadata") or {}).get("generation")
    log.info("dataset_applied", dataset=dataset.name, generation=dataset.generation)
    return status_of(dataset, generation)


def refresh(body: Mapping[str, Any], client: Client) -> dict[str, Any]:
    """The periodic pass: the dataset's status as the cluster has it now; a dataset the
    cluster lost (a wiped etcd, a delete by hand) is declared again."""
    name = document_of(body)["metadata"]["name"]
    try:
        dataset = client.dataset(name)
    except NotFound:
        log.info("dataset_missing_reapplied", dataset=name)
        return apply(body, client)
    return status_of(dataset, (body.get("metadata") or {}).get("generation"))


@dataclass(frozen=True)
class Release:
    """How a deletion ended. The finalizer goes in every case; `confirmed` says whether
    the cluster took the delete (or never had the dataset)."""

    confirmed: bool
    reason: str
    tries: int
    seconds: float


def release(
    body: Mapping[str, Any], client: Client, budget: Budget, *, keep_cache: bool = False
) -> Release:
    """Delete: asks the cluster to delete the dataset (its mount, and its cached blocks
    unless `keep_cache`), retrying within `budget`. Never raises: past the budget, or on
    an error no retry helps, it lets the resource go and says why, so a master that is
    gone cannot hold a namespace's deletion hostage."""
    name = document_of(body)["metadata"]["name"]

    def delete() -> str:
        try:
            client.delete_dataset(name, keep_cache=keep_cache)
        except NotFound:
            return "not in the cluster"
        return "deleted by the cluster"

    outcome = call_within(budget, delete)
    if outcome.ok:
        assert outcome.value is not None
        log.info("dataset_released", dataset=name, outcome=outcome.value, tries=outcome.tries)
        return Release(True, outcome.value, outcome.tries, outcome.seconds)
    reason = (
        f"the cluster did not take the delete within {budget.seconds:g}s "
        f"({outcome.tries} tries): {outcome.error}; it may still hold dataset {name} "
        f"(`reservoir dataset delete {name}` removes it)"
    )
    log.warning("dataset_released_unconfirmed", dataset=name, reason=reason)
    return Release(False, reason, outcome.tries, outcome.seconds)
