"""Under-store requests are timed where stores are opened: each operation of a real
file:// store, by outcome, and a store a server's MountedStores opens is measured while a
client's (no metrics) is not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from reservoir.common.errors import (
    Conflict,
    DeadlineExceeded,
    NotFound,
    OutOfRange,
    PermissionDenied,
    Unavailable,
)
from reservoir.common.models import Mount, MountOptions
from reservoir.common.understore.mounted_stores import MountedStores, open_under_store
from reservoir.common.understore.under_store import UnderStoreSettings
from reservoir.common.understore.under_store_metrics import (
    MeasuredUnderStore,
    UnderStoreMetrics,
    outcome_of,
)

NAME = "test_ufs_request_seconds"


def _count(registry: CollectorRegistry, operation: str, outcome: str) -> float:
    labels = {"operation": operation, "scheme": "file", "outcome": outcome}
    return registry.get_sample_value(f"{NAME}_count", labels) or 0.0


def test_every_operation_is_timed_by_outcome_and_answers_and_errors_pass_unchanged(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    store = open_under_store(
        f"file://{tmp_path}/", UnderStoreSettings(), UnderStoreMetrics(registry, "test_")
    )
    info = store.put("d/a.bin", b"0123456789")
    assert store.head("d/a.bin") == info
    with pytest.raises(NotFound):
        store.head("d/nope")
    assert [o.key for o in store.list("d/").objects] == ["d/a.bin"]
    assert store.get_range("d/a.bin", 2, 3, info.etag) == b"234"
    with pytest.raises(Conflict):
        store.get_range("d/a.bin", 0, 1, "another-etag")
    assert asyncio.run(store.get_range_async("d/a.bin", 8, 10)) == b"89"
    store.check()
    assert store.uri_of("d/a.bin") == f"file://{tmp_path}/d/a.bin"
    assert store.key_of(f"file://{tmp_path}/d/a.bin") == "d/a.bin"

    assert _count(registry, "put", "ok") == 1
    # put reads its own head back inside the put: one head of the caller's, timed.
    assert _count(registry, "head", "ok") == 1
    assert _count(registry, "head", "not_found") == 1
    assert _count(registry, "list", "ok") == 1
    assert _count(registry, "get", "ok") == 2  # the blocking and the awaited read
    assert _count(registry, "get", "conflict") == 1
    assert _count(registry, "check", "ok") == 1
    seconds = registry.get_sample_value(
        f"{NAME}_sum", {"operation": "get", "scheme": "file", "outcome": "ok"}
    )
    assert seconds is not None and seconds > 0


def test_an_outcome_is_the_errors_kind_from_the_error_table() -> None:
    assert outcome_of(NotFound("x")) == "not_found"
    assert outcome_of(PermissionDenied("x")) == "permission_denied"
    assert outcome_of(OutOfRange("x")) == "out_of_range"
    assert outcome_of(Unavailable("x")) == "unavailable"
    assert outcome_of(DeadlineExceeded("x")) == "deadline_exceeded"
    assert outcome_of(asyncio.CancelledError()) == "cancelled"
    assert outcome_of(KeyError("a bug")) == "error"


def test_a_servers_mounted_stores_are_measured_and_a_clients_are_not(tmp_path: Path) -> None:
    mount = Mount("/m", f"file://{tmp_path}/", MountOptions(), 1)
    registry = CollectorRegistry()

    async def scenario() -> None:
        server = MountedStores(timeout_s=1, metrics=UnderStoreMetrics(registry, "test_"))
        measured = await server.open(mount)
        assert isinstance(measured, MeasuredUnderStore)
        measured.check()
        probe = server.probe(mount.uri, mount.options)  # a mount being checked
        assert isinstance(probe, MeasuredUnderStore)
        probe.check()
        client = await MountedStores(timeout_s=1).open(mount)
        assert not isinstance(client, MeasuredUnderStore)

    asyncio.run(scenario())
    assert _count(registry, "check", "ok") == 2
