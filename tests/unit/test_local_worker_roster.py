"""The roster of a local cluster's workers: names, each worker's own options over the
cluster's, and what `local add-worker`/`remove-worker` record for `local up --resume`."""

from __future__ import annotations

from typing import Any

from reservoir.local.worker_roster import (
    WorkerOptions,
    next_worker,
    options_of,
    roster,
    with_worker,
)


def test_an_added_worker_takes_the_number_past_the_highest_even_with_a_gap() -> None:
    assert next_worker(["worker1", "worker3", "master", "etcd"]) == "worker4"
    assert next_worker(["worker9", "worker10"]) == "worker11"
    assert next_worker([]) == "worker1"


def test_a_cluster_recorded_without_a_roster_has_workers_one_to_n_with_its_options() -> None:
    settings = {"workers": 2, "capacity": "2GiB", "shm": True}
    assert list(roster(settings)) == ["worker1", "worker2"]
    assert options_of(settings, "worker2") == WorkerOptions("2GiB", True, "")


def test_a_workers_own_options_win_over_the_clusters_and_the_rest_are_the_clusters() -> None:
    settings: dict[str, Any] = {"workers": 1, "capacity": "1GiB", "disk_capacity": "4GiB"}
    with_worker(settings, "worker2", WorkerOptions(capacity="64MiB", shm=True))
    assert options_of(settings, "worker2") == WorkerOptions("64MiB", True, "4GiB")
    assert options_of(settings, "worker1") == WorkerOptions("1GiB", False, "4GiB")
    assert settings["workers"] == 2


def test_a_removed_worker_leaves_the_roster_and_the_count() -> None:
    settings: dict[str, Any] = {"workers": 3}
    with_worker(settings, "worker2", None)
    assert list(roster(settings)) == ["worker1", "worker3"]
    assert settings["workers"] == 2
    # Recorded as JSON would have it, the roster reads back the same, in number order.
    with_worker(settings, "worker10", WorkerOptions(shm=False))
    assert list(roster(settings)) == ["worker1", "worker3", "worker10"]
    assert settings["roster"]["worker10"] == {"shm": False}


def test_a_workers_own_host_id_is_recorded_for_it_alone() -> None:
    settings: dict[str, object] = {"workers": 1}
    with_worker(settings, "worker2", WorkerOptions(host="h2"))
    assert options_of(settings, "worker2").host == "h2"
    assert options_of(settings, "worker1").host is None  # the machine's host name
