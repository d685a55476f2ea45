"""Every Kubernetes object in deploy/k8s validates against the API schemas of the oldest
and the newest Kubernetes we support (kubernetes-validate, strict: an unknown field is an
error), and the Dataset example is one the CRD and the master both accept."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from reservoir.common.dataset_spec import parse_dataset

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
# Files of these kinds configure a component (read from disk); the API server never sees
# them, so there is no schema of theirs to validate against: parsed and checked below.
CONFIG_FILES = {"KubeSchedulerConfiguration"}
# kubescheduler.config.k8s.io/v1 Extender: its fields (json names) and their types.
EXTENDER_FIELDS = {
    "urlPrefix": str, "filterVerb": str, "preemptVerb": str, "prioritizeVerb": str,
    "weight": int, "bindVerb": str, "enableHTTPS": bool, "tlsConfig": dict,
    "httpTimeout": str, "nodeCacheCapable": bool, "managedResources": list, "ignorable": bool,
}  # fmt: skip


def _patches() -> set[Path]:
    """Files a kustomization applies as patches: parts of objects, not objects."""
    found = set()
    for kustomization in K8S.rglob("kustomization.yaml"):
        for patch in yaml.safe_load(kustomization.read_text()).get("patches", []):
            found.add((kustomization.parent / patch["path"]).resolve())
    return found


def _objects() -> list[tuple[str, dict[str, Any]]]:
    found = []
    patches = _patches()
    for path in sorted(K8S.rglob("*.yaml")):
        if path.resolve() in patches:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") == "Kustomization":
                continue
            if doc.get("apiVersion", "").startswith("reservoir.io/"):
                continue  # ours: checked against the CRD below
            if doc.get("kind") in CONFIG_FILES:
                continue  # a component's configuration file, not an API object
            found.append((str(path.relative_to(K8S)), doc))
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_every_kubernetes_object_validates_strictly(version: str) -> None:
    objects = _objects()
    assert any(doc["kind"] == "CustomResourceDefinition" for _, doc in objects)
    for name, doc in objects:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{name} ({doc['kind']}): {exc.message}") from exc


def test_the_example_dataset_is_valid_for_the_crd_and_for_the_master() -> None:
    crd = yaml.safe_load((K8S / "base" / "dataset-crd.yaml").read_text())
    (served,) = crd["spec"]["versions"]
    example = yaml.safe_load((K8S / "examples" / "dataset.yaml").read_text())
    assert example["apiVersion"] == f"{crd['spec']['group']}/{served['name']}"
    assert example["kind"] == crd["spec"]["names"]["kind"]
    jsonschema.validate(example, served["schema"]["openAPIV3Schema"])
    spec = parse_dataset(example)
    assert spec.name == "imagenet" and spec.preload.policy == "Cron"
    # A field the master refuses, the CRD refuses too.
    wrong = {**example, "spec": {**example["spec"], "cache": {"qouta": "1Gi"}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, served["schema"]["openAPIV3Schema"])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) is not installed")
@pytest.mark.parametrize("overlay", [".", "secure"])
def test_the_rendered_kustomizations_validate_strictly(overlay: str) -> None:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(K8S / overlay)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    assert any(d["kind"] == "StatefulSet" for d in docs)
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, VERSIONS[0], strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(
                f"{overlay}: {doc['kind']} {doc['metadata']['name']}: {exc.message}"
            ) from exc


def test_the_scheduler_configuration_calls_the_extender_service_at_its_routes() -> None:
    from reservoir.k8s.extender import SchedulerExtender

    config = yaml.safe_load((K8S / "scheduler" / "scheduler-config.yaml").read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    (extender,) = config["extenders"]
    for key, value in extender.items():
        assert isinstance(value, EXTENDER_FIELDS[key]), key
    assert 1 <= extender["weight"] <= 100 and extender["managedResources"] == []
    assert extender["nodeCacheCapable"] is False  # the extender reads ExtenderArgs.Nodes
    # The URL is the extender's Service, its verbs the routes the server answers.
    docs = list(yaml.safe_load_all((K8S / "scheduler" / "extender.yaml").read_text()))
    (service,) = [d for d in docs if d["kind"] == "Service"]
    (port,) = service["spec"]["ports"]
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert extender["urlPrefix"] == f"http://{name}.{namespace}.svc:{port['port']}"
    routes = {
        r.resource.canonical
        for r in SchedulerExtender(None, 0.1).app().router.routes()  # type: ignore[arg-type]
        if r.resource is not None
    }
    assert {f"/{extender['filterVerb']}", f"/{extender['prioritizeVerb']}"} <= routes
    # The scheduler gives up after httpTimeout; the extender answers before it.
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert float(env["RESERVOIR_LOCALITY_TIMEOUT"]) < float(extender["httpTimeout"].rstrip("s"))
