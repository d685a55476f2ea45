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
