"""The operator's manifests: least privilege (only the verbs its handlers use, on
datasets, datasets/status and events), one replica that never overlaps another, the CLI
command it runs, and only settings the config declares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from reservoir.cli.main import build_parser
from reservoir.common import config as cfg
from reservoir.common.config import known_names

OPERATOR = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "operator"


def _objects() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(OPERATOR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] != "Kustomization":
                found[doc["kind"]] = doc
    return found


def test_the_cluster_role_grants_only_what_the_handlers_use() -> None:
    rules = {
        (group, resource): sorted(rule["verbs"])
        for rule in _objects()["ClusterRole"]["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rules == {
        ("reservoir.io", "datasets"): ["get", "list", "patch", "watch"],
        ("reservoir.io", "datasets/status"): ["get", "patch"],
        ("", "events"): ["create"],
    }
    binding = _objects()["ClusterRoleBinding"]
    account = _objects()["ServiceAccount"]["metadata"]
    assert binding["roleRef"]["name"] == _objects()["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]


def test_one_operator_runs_the_cli_command_with_declared_settings_only() -> None:
    deployment = _objects()["Deployment"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"  # standalone Kopf: no overlap
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == _objects()["ServiceAccount"]["metadata"]["name"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["command"][1:])
    assert container["command"][0] == "reservoir" and args.command == "operator"
    probe = container["livenessProbe"]["httpGet"]
    assert args.liveness.endswith(f":{probe['port']}{probe['path']}")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert set(env) <= known_names()
    settings = cfg.load(cfg.OperatorConfig, {k: v for k, v in env.items() if v is not None})
    assert settings.finalizer_budget_s < 60
