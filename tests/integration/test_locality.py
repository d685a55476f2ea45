"""Locality with real processes: after a load, `Client.locality` and `reservoir locality`
agree with the location table; the scheduler extender and the admission webhook, each a
`reservoir` process over the cluster, answer recorded ExtenderArgs and AdmissionReview
documents by the bytes cached; with the master unreachable they answer at once, the
extender with its Error set and the webhook admitting the pod unchanged with a warning.

The test cluster's workers share one host, so the recorded documents' node `gpu-node-a`
is renamed to it: that node holds everything, the other two nothing."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from reservoir.local.process import free_port
from tests.eventually import eventually

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data"
DATASET = "imagenet-sample"  # the dataset the recorded pods name
KiB = 1024


def _recorded(name: str, host: str) -> bytes:
    return (DATA / name).read_text().replace("gpu-node-a", host).encode()


def _post(url: str, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=2):
            return True
    except OSError:
        return False


@contextmanager
def _server(command: str, master: str, log: Path, cluster: LocalCluster | None) -> Iterator[str]:
    """`reservoir <command>` on a free port, as an operator runs it; yields its URL."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RESERVOIR_TOKEN")}
    environ |= {"RESERVOIR_LOG_FORMAT": "json", "RESERVOIR_LOCALITY_TIMEOUT": "2"}
    creds = cluster.credentials if cluster is not None else None
    if creds is not None:  # a reader's token: locality is a read
        environ |= {
            "RESERVOIR_TLS_CA": str(creds.ca),
            "RESERVOIR_TOKEN_FILE": str(creds.token("reader")),
        }
    argv = [sys.executable, "-m", "reservoir.cli.main", command, "--master", master]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*argv, "--listen", f"127.0.0.1:{port}"],
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        eventually(
            lambda: proc.poll() is None and _healthy(url),
            timeout_s=30,
            what=f"{command} at {url} answering (log {log})",
        )
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def cached(cluster: LocalCluster) -> Iterator[tuple[int, str]]:
    """The dataset the recorded pods name, declared and preloaded; (its bytes, the
    workers' host)."""
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket="locality-sample")
    size = 0
    for i in range(12):
        body = os.urandom(100 * KiB + i)
        size += len(body)
        s3.put_object(Bucket="locality-sample", Key=f"train/{i:03d}.jpg", Body=body)
    document = {
        "apiVersion": "reservoir.io/v1alpha1",
        "kind": "Dataset",
        "metadata": {"name": DATASET},
        "spec": {
            "source": {"uri": "s3://locality-sample/", "endpointUrl": cluster.s3_endpoint},
            "path": f"/datasets/{DATASET}",
            "preload": {"policy": "Once"},
        },
    }
    with Client(config=cluster.client_config()) as client:
        client.apply_dataset(document)
        eventually(
            lambda: client.dataset(DATASET).ready and client.dataset(DATASET).cached_percent >= 100,
            timeout_s=60,
            what="the dataset preloaded",
        )
        (host,) = {w.host for w in client.workers()}
    try:
        yield size, host
    finally:
        with Client(config=cluster.client_config()) as client:
            client.delete_dataset(DATASET)


def test_locality_after_a_load_agrees_with_the_location_table(
    cluster: LocalCluster, cached: tuple[int, str]
) -> None:
    size, host = cached
    path = f"/datasets/{DATASET}"
    with Client(config=cluster.client_config()) as client:
        by_path = client.locality(path)
        by_name = client.locality(dataset=DATASET)
        report = client.report(path)
        # The table, file by file (what readers are told): bytes of the blocks held.
        entries = client.ls(f"{path}/train", with_locations=True)
        held = sum(
            min(e.block_size, e.size - i * e.block_size) for e in entries for i in e.locations
        )
    assert by_path == by_name
    assert by_path.path == path and by_path.files == 12 and by_path.bytes == size
    assert by_path.cached_bytes == report.cached_bytes == size
    assert [(h.host, h.bytes) for h in by_path.hosts] == [(host, size)]
    assert by_path.zones == {"": size} and by_path.cached_fraction == 1.0
    assert held == size

    shown = subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "--master", cluster.master_address,
         "locality", "--dataset", DATASET, "--json"],
        capture_output=True, text=True, timeout=60, env=os.environ.copy(),
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["cached_bytes"] == size and data["cached_fraction"] == 1.0
    assert data["hosts"] == [
        {"host": host, "zone": "", "region": "", "bytes": size, "fraction": 1.0}
    ]
    table = subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "--master", cluster.master_address,
         "locality", path],
        capture_output=True, text=True, timeout=60, env=os.environ.copy(),
    )  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert host in table.stdout and "100.0%" in table.stdout


def test_extender_ranks_the_node_holding_the_data_first_and_required_filters(
    cluster: LocalCluster, cached: tuple[int, str], tmp_path: Path
) -> None:
    _, host = cached
    log = tmp_path / "extender.log"
    with _server("scheduler-extender", cluster.master_address, log, cluster) as url:
        status, scores = _post(
            url + "/prioritize", _recorded("extender_args_prioritize.json", host)
        )
        assert status == 200, scores
        # HostPriorityList: Go field names as keys, every candidate in the order given.
        assert scores == [
            {"Host": host, "Score": 10},
            {"Host": "gpu-node-b", "Score": 0},
            {"Host": "gpu-node-c", "Score": 0},
        ]

        status, kept = _post(url + "/filter", _recorded("extender_args_filter_required.json", host))
        assert status == 200, kept
        assert [n["metadata"]["name"] for n in kept["Nodes"]["items"]] == [host]
        assert sorted(kept["FailedNodes"]) == ["gpu-node-b", "gpu-node-c"]
        assert "0.0%" in kept["FailedNodes"]["gpu-node-b"] and kept["Error"] == ""

        status, everyone = _post(url + "/filter", _recorded("extender_args_no_datasets.json", host))
        assert status == 200 and everyone["FailedNodes"] == {}
        assert len(everyone["Nodes"]["items"]) == 3

        status, reason = _post(url + "/filter", b'{"Pod": {"metadata": {}}}')
        assert status == 400 and "neither Nodes nor NodeNames" in reason
        status, reason = _post(url + "/prioritize", b"{not json")
        assert status == 400 and "not JSON" in reason


def test_webhook_adds_affinity_toward_the_data_and_the_fuse_volume(
    cluster: LocalCluster, cached: tuple[int, str], tmp_path: Path
) -> None:
    _, host = cached
    log = tmp_path / "webhook.log"
    with _server("admission-webhook", cluster.master_address, log, cluster) as url:
        review = json.loads(_recorded("admission_review_pod_with_datasets.json", host))
        status, answer = _post(url + "/mutate", json.dumps(review).encode())
        assert status == 200, answer
        assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
        response = answer["response"]
        assert response["uid"] == review["request"]["uid"] and response["allowed"] is True
        assert response["patchType"] == "JSONPatch" and "warnings" not in response
        patch = json.loads(base64.b64decode(response["patch"]))
        ops = {op["path"]: op for op in patch}
        terms = ops["/spec/affinity"]["value"]["nodeAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        assert terms == [
            {
                "weight": 100,
                "preference": {
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": [host]}]
                },
            }
        ]  # the workers have no zone or region here: no terms for them
        assert ops["/spec/volumes/-"]["value"] == {
            "name": "reservoir-fuse",
            "hostPath": {"path": f"/mnt/reservoir/datasets/{DATASET}", "type": "Directory"},
        }
        assert ops["/spec/containers/0/volumeMounts/-"]["value"]["mountPath"] == "/data"

        plain = _recorded("admission_review_pod_without_datasets.json", host)
        status, answer = _post(url + "/mutate", plain)
        assert status == 200 and answer["response"]["allowed"] is True
        assert "patch" not in answer["response"]

        status, reason = _post(url + "/mutate", b'{"kind": "AdmissionReview"}')
        assert status == 400 and "request.uid" in reason


def test_with_the_master_unreachable_the_extender_sets_error_and_the_webhook_admits(
    tmp_path: Path,
) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    with _server("scheduler-extender", nobody, tmp_path / "extender.log", None) as url:
        status, kept = _post(url + "/filter", _recorded("extender_args_filter_required.json", "n"))
        assert status == 200 and kept["Error"].startswith("reservoir: ")
        assert kept["Nodes"]["items"] == []
        status, scores = _post(url + "/prioritize", _recorded("extender_args_prioritize.json", "n"))
        assert status == 200 and {s["Score"] for s in scores} == {0}
        # A pod without datasets never waits for the master.
        status, everyone = _post(url + "/filter", _recorded("extender_args_no_datasets.json", "n"))
        assert status == 200 and len(everyone["Nodes"]["items"]) == 3 and everyone["Error"] == ""
    with _server("admission-webhook", nobody, tmp_path / "webhook.log", None) as url:
        review = _recorded("admission_review_pod_with_datasets.json", "n")
        status, answer = _post(url + "/mutate", review)
        response = answer["response"]
        assert status == 200 and response["allowed"] is True
        assert response["warnings"][0].startswith("reservoir: no data-locality affinity added")
        # Only the FUSE volume: it needs no master.
        patch = json.loads(base64.b64decode(response["patch"]))
        assert {op["path"] for op in patch} == {
            "/spec/volumes/-",
            "/spec/containers/0/volumeMounts/-",
        }
