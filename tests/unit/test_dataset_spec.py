"""The Dataset document: defaults for every field, errors that name the field, the CLI's
units, and a document read back as the same spec."""

from __future__ import annotations

import pytest

from reservoir.common.dataset_spec import SECRET_DIR, parse_dataset
from reservoir.common.errors import InvalidArgument
from reservoir.master.cron_schedule import latest_due

GiB = 1 << 30


def _doc(**spec: object) -> dict[str, object]:
    return {
        "apiVersion": "reservoir.io/v1alpha1",
        "kind": "Dataset",
        "metadata": {"name": "imagenet"},
        "spec": {"source": {"uri": "s3://bucket/imagenet/"}, **spec},
    }


def test_a_document_with_only_a_name_and_a_source_gets_every_default() -> None:
    spec = parse_dataset(_doc())
    assert spec.path == "/datasets/imagenet"
    assert spec.access == "ReadOnly" and not spec.writable
    assert spec.preload.policy == "None" and spec.preload.replicas == 1
    assert spec.cache.quota_bytes == 0 and spec.cache.priority == "normal"
    assert spec.under_store.max_requests_per_s == 0
    assert spec.mount_options().dataset == "imagenet"


def test_sizes_and_durations_take_the_clis_units() -> None:
    spec = parse_dataset(
        _doc(
            sync={"interval": "5m"},
            cache={"quota": "200Gi", "idleTTL": "72h", "priority": "high"},
            underStore={"maxRequestsPerSecond": 2000, "maxBytesPerSecond": "2Gi"},
        )
    )
    assert spec.sync.interval_s == 300
    assert spec.cache.quota_bytes == 200 * GiB and spec.cache.idle_ttl_s == 72 * 3600
    assert spec.under_store.max_bytes_per_s == 2 * GiB
    options = spec.mount_options()
    assert options.metadata_sync == "interval:300s"
    assert (options.quota_bytes, options.priority, options.idle_ttl_ms) == (
        200 * GiB, "high", 72 * 3600 * 1000,
    )  # fmt: skip
    assert (options.max_requests_per_s, options.max_bytes_per_s) == (2000, 2 * GiB)


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"cache": {"qouta": "1Gi"}}, "spec.cache.qouta: unknown field"),
        ({"cache": {"quota": "lots"}}, "spec.cache.quota"),
        ({"sync": {"interval": "soon"}}, "spec.sync.interval"),
        ({"access": "Everything"}, "spec.access"),
        ({"preload": {"policy": "Cron", "schedule": "every day"}}, "spec.preload.schedule"),
        ({"preload": {"policy": "Once", "schedule": "0 3 * * *"}}, "spec.preload.schedule"),
        ({"preload": {"paths": ["/elsewhere"]}}, "spec.preload.paths"),
        ({"preload": {"replicas": 0}}, "spec.preload.replicas"),
        ({"underStore": {"maxInFlight": -1}}, "spec.underStore.maxInFlight"),
        ({"source": {"uri": "s3://b/p/", "credentials": "hunter2"}}, "spec.source.credentials"),
        ({"source": {}}, "spec.source.uri"),
        ({"sync": {"events": {"sqsQueueUrl": "not a queue"}}}, "spec.sync.events.sqsQueueUrl"),
    ],
)
def test_a_wrong_field_is_an_error_naming_its_path(spec: dict[str, object], where: str) -> None:
    with pytest.raises(InvalidArgument, match=where.replace(".", r"\.")):
        parse_dataset(_doc(**spec))


def test_a_wrong_kind_or_name_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="kind"):
        parse_dataset({**_doc(), "kind": "Pod"})
    with pytest.raises(InvalidArgument, match="metadata.name"):
        parse_dataset({**_doc(), "metadata": {"name": "Not_A_Name"}})
    with pytest.raises(InvalidArgument, match="unknown field"):
        parse_dataset({**_doc(), "extra": 1})


def test_a_secret_reference_becomes_the_file_the_servers_read() -> None:
    spec = parse_dataset(
        _doc(source={"uri": "s3://b/p/", "credentials": {"secretRef": {"name": "s3-keys"}}})
    )
    assert spec.source.credentials == f"file:{SECRET_DIR}/s3-keys/credentials"


def test_a_spec_written_out_reads_back_as_the_same_spec_and_kubernetes_metadata_is_ignored() -> (
    None
):
    spec = parse_dataset(
        _doc(
            path="/d/in",
            access="ReadWrite",
            sync={
                "interval": "90s",
                "events": {"sqsQueueUrl": "http://127.0.0.1:9324/123456789012/ds-events"},
            },
            preload={"policy": "Cron", "schedule": "0 3 * * *", "paths": ["a", "/d/in/b"]},
            cache={"quota": "1Gi", "pin": True},
        )
    )
    document = spec.to_document()
    document["metadata"].update(namespace="ml", uid="x", resourceVersion="7")  # type: ignore[attr-defined]
    assert parse_dataset(document) == spec
    assert spec.preload_paths() == ["/d/in/a", "/d/in/b"]


def test_a_cron_schedule_is_due_at_its_latest_time_and_missed_runs_count_once() -> None:
    day = 86400.0
    three_am = 3 * 3600.0
    assert latest_due("0 3 * * *", 10 * day + three_am) == 10 * day + three_am
    assert latest_due("0 3 * * *", 10 * day + three_am - 1) == 9 * day + three_am
    # Three days without a master: the latest run only.
    assert latest_due("0 3 * * *", 13 * day + 4 * 3600) == 13 * day + three_am
