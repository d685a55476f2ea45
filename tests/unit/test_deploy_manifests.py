"""The deployment files (docker-compose.yml, deploy/k8s) stay in line with the code.

No network, no container engine: the files are parsed, and `docker-compose config` (when
installed) only validates. Every RESERVOIR_* variable they set must be a setting declared in
reservoir.common.config, and the commands they run must be console scripts of the package.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse the deployment files")

from reservoir.common import config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
K8S_DIR = REPO / "deploy" / "k8s"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
WORKERS = ("worker1", "worker2", "worker3")
MASTER_PORT = 19998
WORKER_PORT = 29998


def declared_settings() -> set[str]:
    names: set[str] = set()
    for cls in (config.LogConfig, config.MasterConfig, config.WorkerConfig, config.ClientConfig):
        for f in dataclasses.fields(cls):
            if "env" in f.metadata:
                names.add(f.metadata["env"])
    return names


def console_scripts() -> dict[str, str]:
    with (REPO / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)["project"]["scripts"]


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a mapping, whichever form compose allows it in."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def command_argv(command: str | list[str]) -> list[str]:
    return command.split() if isinstance(command, str) else list(command)


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path.name, doc))
    return docs


def k8s_containers(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    pod = doc.get("spec", {}).get("template", {}).get("spec", {})
    yield from pod.get("initContainers", [])
    yield from pod.get("containers", [])


def k8s_workload(kind: str, name: str) -> dict[str, Any]:
    for _, doc in k8s_documents():
        if doc.get("kind") == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name} in {K8S_DIR}")


def main_container(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]["containers"][0]


# --- docker-compose ----------------------------------------------------------------------


def test_docker_compose_config_validates_the_compose_file() -> None:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    result = subprocess.run(
        [binary, "-f", str(COMPOSE_FILE), "config", "--quiet"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_compose_defines_etcd_s3_master_and_three_workers() -> None:
    services = load_compose()["services"]
    assert {"etcd", "s3", "master", *WORKERS} <= set(services)


def test_compose_sets_only_reservoir_variables_that_config_declares() -> None:
    declared = declared_settings()
    used = {
        (name, var)
        for name, service in load_compose()["services"].items()
        for var in compose_env(service)
        if var.startswith("RESERVOIR_")
    }
    assert used, "expected the compose file to set RESERVOIR_* variables"
    unknown = sorted((name, var) for name, var in used if var not in declared)
    assert not unknown, f"not settings in reservoir.common.config: {unknown}"


def test_compose_workers_have_unique_ids_and_advertise_their_own_service_name() -> None:
    services = load_compose()["services"]
    ids, advertised = [], []
    for name in WORKERS:
        env = compose_env(services[name])
        ids.append(env["RESERVOIR_WORKER_ID"])
        advertised.append(env["RESERVOIR_WORKER_ADVERTISE"])
        host, _, port = env["RESERVOIR_WORKER_ADVERTISE"].rpartition(":")
        assert host == name, "other containers reach a worker by its service name"
        assert port == env["RESERVOIR_WORKER_LISTEN"].rpartition(":")[2]
    assert len(set(ids)) == len(WORKERS)
    assert len(set(advertised)) == len(WORKERS)


def test_compose_workers_find_master_and_etcd_by_service_name() -> None:
    services = load_compose()["services"]
    master_port = compose_env(services["master"])["RESERVOIR_MASTER_LISTEN"].rpartition(":")[2]
    assert master_port == str(MASTER_PORT)
    for name in ("master", *WORKERS):
        assert compose_env(services[name])["RESERVOIR_METADATA_URL"] == "etcd://etcd:2379"
    for name in WORKERS:
        env = compose_env(services[name])
        assert env["RESERVOIR_MASTER"] == f"master:{master_port}"
        assert config.parse_size(env["RESERVOIR_WORKER_CAPACITY"]) > 0


def test_every_compose_service_has_a_healthcheck() -> None:
    for name, service in load_compose()["services"].items():
        check = service.get("healthcheck")
        assert check and not check.get("disable"), f"{name} has no healthcheck"
        assert check.get("test"), f"{name} healthcheck has no test"
        assert check["test"] != ["NONE"], f"{name} healthcheck is disabled"


def test_compose_healthchecks_probe_the_port_each_server_listens_on() -> None:
    services = load_compose()["services"]
    master = services["master"]
    port = compose_env(master)["RESERVOIR_MASTER_LISTEN"].rpartition(":")[2]
    assert f"127.0.0.1:{port}" in " ".join(master["healthcheck"]["test"])
    for name in WORKERS:
        port = compose_env(services[name])["RESERVOIR_WORKER_LISTEN"].rpartition(":")[2]
        assert f"127.0.0.1:{port}" in " ".join(services[name]["healthcheck"]["test"])


def test_compose_master_and_workers_run_the_packaged_console_scripts() -> None:
    scripts = console_scripts()
    services = load_compose()["services"]
    assert command_argv(services["master"]["command"])[0] == "reservoir-master"
    for name in WORKERS:
        assert command_argv(services[name]["command"])[0] == "reservoir-worker"
    for name in ("master", *WORKERS):
        assert command_argv(services[name]["command"])[0] in scripts


def test_compose_servers_start_only_after_their_dependencies_are_healthy() -> None:
    services = load_compose()["services"]
    expected = {"master": {"etcd", "s3"}, **{name: {"etcd", "s3", "master"} for name in WORKERS}}
    for name, needs in expected.items():
        depends_on = services[name]["depends_on"]
        assert isinstance(depends_on, dict), f"{name}: depends_on needs conditions"
        assert needs <= set(depends_on), name
        for dep in needs:
            assert depends_on[dep].get("condition") == "service_healthy", (name, dep)


def test_compose_master_and_workers_build_from_the_deploy_dockerfile() -> None:
    services = load_compose()["services"]
    for name in ("master", *WORKERS):
        build = services[name]["build"]
        assert (REPO / build.get("context", ".") / build["dockerfile"]) == DOCKERFILE


# --- Dockerfile --------------------------------------------------------------------------


def test_image_installs_the_server_extra_and_runs_as_a_non_root_user() -> None:
    text = DOCKERFILE.read_text()
    assert "python:3.11-slim" in text
    assert ".[server]" in text
    users = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert users and not users[-1].startswith(("root", "0")), "the image must not run as root"


def test_dockerignore_keeps_local_state_out_of_the_build_context() -> None:
    patterns = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".git", ".reservoir"} <= patterns


# --- Kubernetes --------------------------------------------------------------------------


def test_k8s_manifests_set_only_reservoir_variables_that_config_declares() -> None:
    declared = declared_settings()
    used = set()
    for filename, doc in k8s_documents():
        for container in k8s_containers(doc):
            for var in container.get("env", []):
                if var["name"].startswith("RESERVOIR_"):
                    used.add((filename, container["name"], var["name"]))
    assert used, "expected the manifests to set RESERVOIR_* variables"
    unknown = sorted(item for item in used if item[2] not in declared)
    assert not unknown, f"not settings in reservoir.common.config: {unknown}"


def test_k8s_kustomization_lists_every_manifest_in_the_directory() -> None:
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    manifests = {p.name for p in K8S_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests


def test_k8s_every_document_names_its_api_kind_and_name() -> None:
    for filename, doc in k8s_documents():
        assert doc.get("apiVersion") and doc.get("kind"), filename
        if doc["kind"] != "Kustomization":
            assert doc["metadata"]["name"], filename


def test_k8s_master_and_worker_run_the_packaged_console_scripts() -> None:
    scripts = console_scripts()
    master = main_container(k8s_workload("Deployment", "reservoir-master"))
    worker = main_container(k8s_workload("DaemonSet", "reservoir-worker"))
    assert master["command"][0] == "reservoir-master" in scripts
    assert worker["command"][0] == "reservoir-worker" in scripts


def test_k8s_servers_are_probed_over_grpc_health_on_their_listen_port() -> None:
    for kind, name, setting in (
        ("Deployment", "reservoir-master", "RESERVOIR_MASTER_LISTEN"),
        ("DaemonSet", "reservoir-worker", "RESERVOIR_WORKER_LISTEN"),
    ):
        container = main_container(k8s_workload(kind, name))
        env = {e["name"]: e.get("value") for e in container["env"]}
        port = int(env[setting].rpartition(":")[2])
        assert port in {p["containerPort"] for p in container["ports"]}
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"]["port"] == port, (name, probe)


def test_k8s_single_master_until_leader_election_exists() -> None:
    master = k8s_workload("Deployment", "reservoir-master")
    assert master["spec"]["replicas"] == 1
    assert master["spec"]["strategy"]["type"] == "Recreate"


def test_k8s_worker_identity_comes_from_the_node_and_pod_ip() -> None:
    worker = main_container(k8s_workload("DaemonSet", "reservoir-worker"))
    env = {e["name"]: e for e in worker["env"]}

    def field(name: str) -> str:
        return env[name]["valueFrom"]["fieldRef"]["fieldPath"]

    assert field("RESERVOIR_WORKER_ID") == "spec.nodeName"
    assert field("RESERVOIR_HOST") == "spec.nodeName"
    advertise = env["RESERVOIR_WORKER_ADVERTISE"]["value"]
    ip_var = advertise.removeprefix("$(").partition(")")[0]
    assert field(ip_var) == "status.podIP"
    # $(VAR) is only expanded when VAR is defined earlier in the list.
    names = [e["name"] for e in worker["env"]]
    assert names.index(ip_var) < names.index("RESERVOIR_WORKER_ADVERTISE")
    assert advertise.endswith(f":{WORKER_PORT}")


def test_k8s_s3_credentials_come_only_from_an_optional_secret() -> None:
    for _, doc in k8s_documents():
        for container in k8s_containers(doc):
            for var in container.get("env", []):
                if var["name"].startswith("AWS_"):
                    assert "value" not in var, f"{var['name']} must not be a literal"
                    ref = var["valueFrom"]["secretKeyRef"]
                    assert ref["optional"] is True
                    assert ref["key"] == var["name"]
