"""The dataset handlers registered with Kopf: create, update and resume forward the spec,
a timer copies the status, delete releases the finalizer within its budget. Errors become
Kopf's: a spec the cluster refuses is permanent (said in an event, never retried), an
unreachable master temporary (retried with a bound)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kopf

from reservoir.client import Client
from reservoir.common import config as cfg
from reservoir.common.errors import InvalidArgument, ReservoirError

from . import dataset_handlers as handlers
from .bounded_calls import Budget

GROUP = "reservoir.io"
VERSION = "v1alpha1"
PLURAL = "datasets"
FINALIZER = "reservoir.io/dataset"
# `reservoir.io/keep-cache: "true"` on a Dataset: its delete leaves the cached blocks.
KEEP_CACHE = "reservoir.io/keep-cache"


def finalizer_budget(config: cfg.OperatorConfig) -> Budget:
    return Budget(
        seconds=config.finalizer_budget_s,
        call_s=config.call_timeout_s,
        backoff_s=config.retry_backoff_s,
        backoff_max_s=config.retry_backoff_max_s,
    )


def operator_client(config: cfg.OperatorConfig) -> Client:
    """The operator's client: every master call within the operator's call deadline."""
    from dataclasses import replace

    return Client(
        config=replace(
            config.client,
            rpc_timeout_s=config.call_timeout_s,
            master_probe_timeout_s=min(config.client.master_probe_timeout_s, config.call_timeout_s),
        )
    )


def _forwarded(call: Callable[[], dict[str, Any]], body: kopf.Body) -> dict[str, Any]:
    try:
        return call()
    except InvalidArgument as exc:
        kopf.warn(body, reason="InvalidSpec", message=str(exc))
        raise kopf.PermanentError(f"the cluster refuses this Dataset: {exc}") from exc
    except ReservoirError as exc:
        raise kopf.TemporaryError(f"the cluster did not answer: {exc}") from exc


def registry(config: cfg.OperatorConfig, client: Client) -> kopf.OperatorRegistry:
    """Every handler of the operator, on a registry of its own (nothing registers at import)."""
    reg = kopf.OperatorRegistry()
    on: dict[str, Any] = {"group": GROUP, "version": VERSION, "plural": PLURAL, "registry": reg}
    budget = finalizer_budget(config)
    retries: dict[str, Any] = {
        "retries": config.apply_retries,
        "backoff": config.retry_backoff_max_s,
    }

    @kopf.on.startup(registry=reg)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = FINALIZER
        settings.posting.level = 20  # logging.INFO: events for what happened, not debug
        # No watching of CRDs and namespaces: the resource is known, and the ClusterRole
        # (deploy/k8s/operator/rbac.yaml) grants only what the handlers use.
        settings.scanning.disabled = True

    # Short ids: Kopf keeps each handler's progress under its id in the object.
    @kopf.on.create(**on, id="forward", **retries)
    @kopf.on.update(**on, id="forward", field="spec", **retries)
    @kopf.on.resume(**on, id="forward", **retries)
    def forward(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        status = _forwarded(lambda: handlers.apply(body, client), body)
        patch.status.update(status)

    @kopf.timer(**on, id="copy-status", interval=config.status_interval_s)
    def copy_status(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        if body.meta.get("deletionTimestamp"):
            return
        status = _forwarded(lambda: handlers.refresh(body, client), body)
        patch.status.update(status)

    @kopf.on.delete(
        **on, id="release", timeout=config.finalizer_budget_s + config.call_timeout_s, retries=1
    )
    def delete(body: kopf.Body, **_: Any) -> None:
        keep = str(body.meta.annotations.get(KEEP_CACHE, "")).lower() == "true"
        released = handlers.release(body, client, budget, keep_cache=keep)
        if not released.confirmed:
            kopf.warn(body, reason="ReleasedUnconfirmed", message=released.reason)

    return reg
