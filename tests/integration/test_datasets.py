"""Declared datasets with real processes: `reservoir apply` of a Dataset document mounts the
bucket, loads its namespace and preloads it; the same document again changes nothing (not
one GET); the CLI lists, shows and deletes it; a leader killed mid-reconcile leaves the
next leader to finish, with nothing done twice."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from reservoir.client import Client, Dataset
from reservoir.local.cluster import LocalCluster
from tests.cli_runs import run_cli as _cli

from ..conftest import LEASE_TTL_S

pytestmark = pytest.mark.integration

KiB = 1024


def _document(cluster: LocalCluster, bucket: str, name: str, **spec: object) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "reservoir.io/v1alpha1",
            "kind": "Dataset",
            "metadata": {"name": name},
            "spec": {
                "source": {"uri": f"s3://{bucket}/data/", "endpointUrl": cluster.s3_endpoint},
                "path": f"/datasets/{name}",
                **spec,
            },
        }
    )


def _bucket(cluster: LocalCluster, name: str, files: int, size: int) -> dict[str, bytes]:
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=name)
    data = {f"f{i:03d}": os.urandom(size) for i in range(files)}
    for key, body in data.items():
        s3.put_object(Bucket=name, Key=f"data/{key}", Body=body)
    return data


def _until_ready(client: Client, name: str, timeout_s: float = 60) -> Dataset:
    deadline = time.monotonic() + timeout_s
    while True:
        d = client.dataset(name)
        if d.ready and d.cached_percent >= 100.0:
            return d
        assert time.monotonic() < deadline, d.status
        time.sleep(0.2)


@pytest.fixture
def two_masters(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(tmp_path / "c", workers=2, masters=2, lease_ttl=LEASE_TTL_S)
    try:
        yield cluster
    finally:
        cluster.down()


def test_apply_mounts_syncs_and_preloads_and_applying_again_changes_nothing(
    cluster: LocalCluster,
) -> None:
    files = _bucket(cluster, "ds-apply", files=6, size=300 * KiB)
    document = _document(cluster, "ds-apply", "apply-once", preload={"policy": "Once"})
    done = _cli(cluster, "apply", "-f", "-", stdin=document)
    assert done.returncode == 0, done.stderr
    assert "dataset/apply-once applied (generation 1)" in done.stdout
    with Client(cluster.master_address) as client:
        ready = _until_ready(client, "apply-once")
        assert ready.status["files"] == 6
        assert {c["type"] for c in ready.status["conditions"] if c["status"]} >= {
            "Mounted", "Synced", "Preloaded",
        }  # fmt: skip
        jobs = len(client.jobs())
        gets = cluster.s3_counts().get("GET", 0)
        again = _cli(cluster, "apply", "-f", "-", stdin=document)
        assert again.returncode == 0, again.stderr
        time.sleep(2.5)  # a few reconcile passes
        assert client.dataset("apply-once").generation == 1
        assert len(client.jobs()) == jobs
        assert cluster.s3_counts().get("GET", 0) == gets
        for key, body in files.items():
            with client.open(f"/datasets/apply-once/{key}") as f:
                assert f.read() == body
        assert cluster.s3_counts().get("GET", 0) == gets  # all of it was preloaded

    listed = _cli(cluster, "datasets", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    (mine,) = [d for d in json.loads(listed.stdout) if d["name"] == "apply-once"]
    assert mine["spec"]["preload"]["policy"] == "Once" and mine["status"]["phase"] == "Ready"
    as_yaml = yaml.safe_load(_cli(cluster, "datasets", "-o", "yaml").stdout)
    assert "apply-once" in [d["name"] for d in as_yaml]
    shown = _cli(cluster, "dataset", "show", "apply-once")
    assert shown.returncode == 0 and "Ready" in shown.stdout and "100.0%" in shown.stdout
    mounts = _cli(cluster, "mounts", "--json")
    (mount,) = [m for m in json.loads(mounts.stdout) if m["path"] == "/datasets/apply-once"]
    assert mount["dataset"] == "apply-once"

    deleted = _cli(cluster, "dataset", "delete", "apply-once")
    assert deleted.returncode == 0, deleted.stderr
    with Client(cluster.master_address) as client:
        deadline = time.monotonic() + 20
        while any(d.name == "apply-once" for d in client.datasets()):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert "/datasets/apply-once" not in [m.path for m in client.mounts()]


def test_a_bad_document_is_refused_naming_the_field(cluster: LocalCluster) -> None:
    document = _document(cluster, "nobucket", "bad-one", cache={"qouta": "1Gi"})
    done = _cli(cluster, "apply", "-f", "-", stdin=document)
    assert done.returncode != 0
    assert "spec.cache.qouta: unknown field" in done.stderr


def test_a_leader_killed_mid_reconcile_leaves_the_next_one_to_finish_it_once(
    two_masters: LocalCluster,
) -> None:
    cluster = two_masters
    _bucket(cluster, "ds-failover", files=24, size=512 * KiB)
    document = _document(cluster, "ds-failover", "failover", preload={"policy": "Once"})
    with Client(cluster.master_address) as client:
        (leader,) = [m for m in client.masters() if m.role == "leader"]
        client.apply_dataset(document)
        name = next(
            n
            for n in cluster.master_names()
            if f"127.0.0.1:{cluster.processes[n].port}" == leader.address
        )
        cluster.kill(name)
        ready = _until_ready(client, "failover", timeout_s=90)
        preloads = [j for j in client.jobs() if j.path == "/datasets/failover"]
        assert len(preloads) == 1, preloads  # started once, whichever leader started it
        assert len(ready.status["runs"]) == 1
