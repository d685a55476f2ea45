"""The operator's pure parts: what a Dataset resource forwards (its spec, none of
Kubernetes' metadata), the status it gets back in Kubernetes' spelling, retries bounded
by a time budget, and settings that cannot keep the finalizer's promise refused."""

from __future__ import annotations

import pytest

from reservoir.client.datasets import Dataset
from reservoir.common import config as cfg
from reservoir.common.dataset_spec import parse_dataset
from reservoir.common.errors import InvalidArgument, NotFound, Unavailable
from reservoir.operator.bounded_calls import Budget, call_within
from reservoir.operator.dataset_handlers import document_of, status_of

BODY = {
    "apiVersion": "reservoir.io/v1alpha1",
    "kind": "Dataset",
    "metadata": {
        "name": "imagenet",
        "namespace": "ml",
        "uid": "u-1",
        "deletionTimestamp": "2026-01-01T00:00:00Z",
        "ownerReferences": [{"kind": "Job"}],
        "generation": 3,
    },
    "spec": {"source": {"uri": "s3://b/imagenet/"}, "cache": {"pin": True}},
    "status": {"phase": "Ready"},
}


def test_a_resource_forwards_its_name_and_spec_and_nothing_of_kubernetes() -> None:
    document = document_of(BODY)
    assert document == {
        "apiVersion": "reservoir.io/v1alpha1",
        "kind": "Dataset",
        "metadata": {"name": "imagenet"},
        "spec": BODY["spec"],
    }
    assert parse_dataset(document).cache.pin  # what the master reads, it accepts
    with pytest.raises(InvalidArgument, match="without a name"):
        document_of({"spec": {}})


def test_the_clusters_status_is_written_in_kubernetes_spelling() -> None:
    dataset = Dataset(
        name="imagenet",
        document={"spec": {"path": "/datasets/imagenet"}},
        status={
            "phase": "Ready",
            "observed_generation": 2,
            "cached_bytes": 50,
            "total_bytes": 200,
            "files": 7,
            "cached_percent": 25.0,
            "last_sync_ms": 1_700_000_000_000,
            "conditions": [
                {"type": "Mounted", "status": True, "reason": "", "message": "", "changed_ms": 0},
                {"type": "Synced", "status": False, "reason": "Unavailable", "message": "s3 down",
                 "changed_ms": 1_700_000_000_000},
            ],
        },
        generation=2,
    )  # fmt: skip
    status = status_of(dataset, generation=3)
    assert status["phase"] == "Ready" and status["ready"]
    assert (status["cachedPercent"], status["cachedBytes"], status["totalBytes"]) == (25.0, 50, 200)
    assert status["observedGeneration"] == 3
    assert status["lastSyncTime"] == "2023-11-14T22:13:20Z"
    mounted, synced = status["conditions"]
    assert mounted == {
        "type": "Mounted",
        "status": "True",
        "reason": "Mounted",
        "message": "",
        "lastTransitionTime": "1970-01-01T00:00:00Z",
    }
    assert (synced["status"], synced["reason"], synced["message"]) == (
        "False",
        "Unavailable",
        "s3 down",
    )


class SteppedClock:
    """Time that passes only when the code waits, or a call takes its deadline."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_retries_stop_before_a_try_could_overrun_the_budget() -> None:
    clock = SteppedClock()
    budget = Budget(seconds=45.0, call_s=5.0, backoff_s=0.5, backoff_max_s=5.0)

    def hung_master() -> None:
        clock.now += budget.call_s  # each try waits out its deadline
        raise Unavailable("deadline exceeded")

    outcome = call_within(budget, hung_master, clock=clock, sleep=clock.sleep)
    assert not outcome.ok and isinstance(outcome.error, Unavailable)
    assert outcome.tries >= 3
    assert outcome.seconds <= budget.seconds + budget.call_s


def test_an_error_no_retry_helps_ends_at_once_and_an_answer_is_returned() -> None:
    clock = SteppedClock()
    budget = Budget(seconds=45.0, call_s=5.0, backoff_s=0.5, backoff_max_s=5.0)
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise NotFound("no such dataset")

    outcome = call_within(budget, refused, clock=clock, sleep=clock.sleep)
    assert isinstance(outcome.error, NotFound) and outcome.tries == 1 == len(calls)
    answers = iter([Unavailable("leader changing"), "ok"])

    def flaky() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    done = call_within(budget, flaky, clock=clock, sleep=clock.sleep)
    assert done.ok and done.value == "ok" and done.tries == 2


@pytest.mark.parametrize(
    "settings",
    [
        {"finalizer_budget_s": 60.0},  # Kubernetes' and the issue's limit: below it
        {"call_timeout_s": 50.0},  # one try longer than the whole budget
        {"retry_backoff_s": 0.0},
        {"status_interval_s": 0.0},
    ],
)
def test_operator_settings_that_break_the_finalizers_bound_are_refused(
    settings: dict[str, float],
) -> None:
    with pytest.raises(InvalidArgument):
        cfg.OperatorConfig(**settings)  # type: ignore[arg-type]
