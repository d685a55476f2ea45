"""The deployment files (docker-compose.yml, docker-compose.secure.yml, deploy/k8s) stay in
line with the code.

No network, no container engine: the files are parsed, and `docker-compose config` (when
installed) only validates. Every RESERVOIR_* variable they set must be a setting declared in
reservoir.common.config, and the commands they run must be console scripts of the package.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse the deployment files")

from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402

from reservoir.common import config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
SECURE_COMPOSE_FILE = REPO / "docker-compose.secure.yml"
K8S_ROOT = REPO / "deploy" / "k8s"
K8S_DIR = K8S_ROOT / "base"
K8S_SECURE = K8S_ROOT / "secure"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus.yml"
IMAGE_LOCK = REPO / "deploy" / "requirements-server.txt"
WORKERS = ("worker1", "worker2", "worker3")
# etcd runs as three members, one cluster; every server is given all of them.
ETCD_MEMBERS = ("etcd1", "etcd2", "etcd3")
COMPOSE_METADATA_URL = "etcd://etcd1:2379,etcd2:2379,etcd3:2379"
K8S_ETCD_PODS = ("etcd-0", "etcd-1", "etcd-2")
K8S_METADATA_URL = "etcd://etcd-0.etcd:2379,etcd-1.etcd:2379,etcd-2.etcd:2379"
# One leads, one stands by (README, "Several masters").
MASTERS = ("master", "master2")
MASTER_PORT = 19998
WORKER_PORT = 29998


def declared_settings() -> set[str]:
    names: set[str] = set()
    classes = (
        config.LogConfig,
        config.SecuritySettings,
        config.EtcdSettings,
        config.MetricsSettings,
        config.MasterConfig,
        config.WorkerConfig,
        config.ClientConfig,
        config.GatewayConfig,
        config.OperatorConfig,
    )
    for cls in classes:
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


def test_compose_defines_three_etcd_members_s3_two_masters_and_three_workers() -> None:
    services = load_compose()["services"]
    assert {*ETCD_MEMBERS, "s3", *MASTERS, *WORKERS} <= set(services)
    assert not {name for name in services if name.startswith("etcd")} - set(ETCD_MEMBERS)


def assert_members_form_one_cluster(
    commands: dict[str, list[str]], host: Callable[[str], str], scheme: str = "http"
) -> None:
    """etcd members' command lines: each advertises itself at `host(name)`, all list the
    same peers (each at the URL it advertises), start as one new cluster, and compact
    their history."""
    flags = {name: long_flags(argv) for name, argv in commands.items()}
    clusters = {f["initial-cluster"] for f in flags.values()}
    assert len(clusters) == 1, "every member must list the same initial cluster"
    peers = dict(item.split("=", 1) for item in clusters.pop().split(","))
    assert len(peers) == len(commands) == 3
    tokens = {f.get("initial-cluster-token") for f in flags.values()}
    assert len(tokens) == 1 and None not in tokens
    for name, f in flags.items():
        member = host(name)
        assert f["advertise-client-urls"] == f"{scheme}://{member}:2379", name
        assert f["initial-advertise-peer-urls"] == f"http://{member}:2380", name
        assert peers[f["name"]] == f["initial-advertise-peer-urls"], name
        assert f["initial-cluster-state"] == "new", name
        assert f["auto-compaction-mode"] in ("periodic", "revision"), name
        assert f["auto-compaction-retention"], name


def metadata_endpoints(url: str) -> list[str]:
    assert url.startswith("etcd://"), url
    return url.removeprefix("etcd://").split(",")


def test_compose_etcd_members_form_one_cluster_that_compacts_and_keep_their_own_data() -> None:
    services = load_compose()["services"]
    members = {name: command_argv(services[name]["command"]) for name in ETCD_MEMBERS}
    assert_members_form_one_cluster(members, host=lambda name: name)
    volumes = [services[name]["volumes"][0].split(":")[0] for name in ETCD_MEMBERS]
    assert len(set(volumes)) == len(ETCD_MEMBERS), "one data volume per member"
    assert set(volumes) <= set(load_compose()["volumes"])
    assert metadata_endpoints(COMPOSE_METADATA_URL) == [f"{m}:2379" for m in ETCD_MEMBERS]


def test_compose_masters_advertise_their_own_service_names_on_one_port() -> None:
    services = load_compose()["services"]
    for name in MASTERS:
        env = compose_env(services[name])
        assert env["RESERVOIR_MASTER_ADVERTISE"] == f"{name}:{MASTER_PORT}"
        assert env["RESERVOIR_MASTER_LISTEN"] == f"0.0.0.0:{MASTER_PORT}"


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
    for name in (*MASTERS, *WORKERS):
        assert compose_env(services[name])["RESERVOIR_METADATA_URL"] == COMPOSE_METADATA_URL
    for name in WORKERS:
        env = compose_env(services[name])
        assert env["RESERVOIR_MASTER"] == ",".join(f"{m}:{master_port}" for m in MASTERS)
        assert config.parse_size(env["RESERVOIR_WORKER_CAPACITY"]) > 0


def test_every_compose_service_has_a_healthcheck() -> None:
    for name, service in load_compose()["services"].items():
        check = service.get("healthcheck")
        assert check and not check.get("disable"), f"{name} has no healthcheck"
        assert check.get("test"), f"{name} healthcheck has no test"
        assert check["test"] != ["NONE"], f"{name} healthcheck is disabled"


def test_compose_healthchecks_probe_the_port_each_server_listens_on() -> None:
    services = load_compose()["services"]
    for name in MASTERS:
        port = compose_env(services[name])["RESERVOIR_MASTER_LISTEN"].rpartition(":")[2]
        assert f"127.0.0.1:{port}" in " ".join(services[name]["healthcheck"]["test"])
    for name in WORKERS:
        port = compose_env(services[name])["RESERVOIR_WORKER_LISTEN"].rpartition(":")[2]
        assert f"127.0.0.1:{port}" in " ".join(services[name]["healthcheck"]["test"])


def test_compose_master_and_workers_run_the_packaged_console_scripts() -> None:
    scripts = console_scripts()
    services = load_compose()["services"]
    for name in MASTERS:
        assert command_argv(services[name]["command"])[0] == "reservoir-master"
    for name in WORKERS:
        assert command_argv(services[name]["command"])[0] == "reservoir-worker"
    for name in (*MASTERS, *WORKERS):
        assert command_argv(services[name]["command"])[0] in scripts


def test_compose_servers_start_only_after_their_dependencies_are_healthy() -> None:
    services = load_compose()["services"]
    expected = {
        **{name: {*ETCD_MEMBERS, "s3"} for name in MASTERS},
        **{name: {*ETCD_MEMBERS, "s3", "master"} for name in WORKERS},
    }
    for name, needs in expected.items():
        depends_on = services[name]["depends_on"]
        assert isinstance(depends_on, dict), f"{name}: depends_on needs conditions"
        assert needs <= set(depends_on), name
        for dep in needs:
            assert depends_on[dep].get("condition") == "service_healthy", (name, dep)


def test_compose_master_and_workers_build_from_the_deploy_dockerfile() -> None:
    services = load_compose()["services"]
    for name in (*MASTERS, *WORKERS):
        build = services[name]["build"]
        assert (REPO / build.get("context", ".") / build["dockerfile"]) == DOCKERFILE


def test_compose_servers_serve_metrics_and_prometheus_scrapes_every_one_of_them() -> None:
    services = load_compose()["services"]
    served = set()
    for name in (*MASTERS, *WORKERS, "gateway"):
        env = compose_env(services[name])
        host, _, port = env["RESERVOIR_METRICS_LISTEN"].rpartition(":")
        assert host == "0.0.0.0", f"{name}: other containers must reach its metrics"
        grpc_listen = (
            env.get("RESERVOIR_MASTER_LISTEN")
            or env.get("RESERVOIR_WORKER_LISTEN")
            or env["RESERVOIR_GATEWAY_LISTEN"]
        )
        assert port != grpc_listen.rpartition(":")[2], name
        served.add(f"{name}:{port}")
    prometheus = services["prometheus"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in prometheus["command"])
    mounted = {}
    for volume in prometheus["volumes"]:
        source, target, *_ = volume.split(":")
        mounted[target] = source
    config_file = mounted[flags["config.file"]]
    assert (REPO / config_file).resolve() == PROMETHEUS_CONFIG
    scraped = {
        target
        for job in yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"]
        if job.get("metrics_path", "/metrics") == "/metrics"
        for group in job["static_configs"]
        for target in group["targets"]
    }
    assert scraped == served
    assert prometheus["depends_on"]["master"]["condition"] == "service_healthy"


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


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    instructions, current = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        text = line.strip()
        if not current and (not text or text.startswith("#")):
            continue
        current += " " + text.removesuffix("\\").strip() if current else text.removesuffix("\\")
        if not text.endswith("\\"):
            keyword, _, rest = current.strip().partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
            current = ""
    return instructions


def image_lock() -> dict[str, str]:
    pins = {}
    for line in IMAGE_LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version and " " not in line, f"not a pin: {line}"
            pins[canonicalize_name(name)] = version
    return pins


def test_compose_files_have_no_obsolete_version_key() -> None:
    for path in (COMPOSE_FILE, SECURE_COMPOSE_FILE):
        assert "version" not in yaml.safe_load(path.read_text()), path.name


def test_compose_master_container_runs_the_cli_against_its_own_master() -> None:
    # `docker-compose exec master reservoir workers`: the CLI there finds the master by
    # RESERVOIR_MASTER, the way any client does.
    from reservoir.client.discovery import client_config

    for name in MASTERS:
        env = compose_env(load_compose()["services"][name])
        found = client_config(environ=env, state_dir=REPO / "no-local-cluster-here").master
        assert found == env["RESERVOIR_MASTER"]
        own, *others = found.split(",")
        # Its own master first, then the other one: the CLI follows whichever leads.
        assert own.rpartition(":")[0] in ("127.0.0.1", "localhost", name)
        assert {o.rpartition(":")[0] for o in others} == set(MASTERS) - {name}
        for address in found.split(","):
            assert address.rpartition(":")[2] == env["RESERVOIR_MASTER_LISTEN"].rpartition(":")[2]


def test_image_installs_pinned_dependencies_in_a_cached_layer_before_the_source() -> None:
    steps = dockerfile_instructions()
    copies = [(i, args) for i, (kind, args) in enumerate(steps) if kind == "COPY"]
    runs = [(i, args) for i, (kind, args) in enumerate(steps) if kind == "RUN"]
    lock = IMAGE_LOCK.relative_to(REPO).as_posix()
    assert not [a for _, a in copies if a.split()[0] == "."], "COPY . would ship everything"
    (lock_copy,) = [i for i, a in copies if a.split()[:-1] == [lock]]
    (deps,) = [i for i, a in runs if f"-r {lock}" in a]
    source = min(i for i, a in copies if "services" in a.split()[:-1])
    assert lock_copy < deps < source, "dependencies must be installed before the source lands"
    assert "--no-deps" in steps[deps][1] and "pip check" in steps[deps][1]
    (package,) = [a for i, a in runs if i > source and "pip install" in a]
    # Nothing more from the network for the package: its dependencies are all in the lock.
    assert "--no-deps" in package and "--no-build-isolation" in package
    assert "pip check" in package


def test_image_lock_pins_every_dependency_of_the_server_install_within_its_bounds() -> None:
    pins = image_lock()
    with (REPO / "pyproject.toml").open("rb") as fh:
        pyproject = tomllib.load(fh)
    project = pyproject["project"]
    wanted = [
        *project["dependencies"],
        *project["optional-dependencies"]["server"],
        *pyproject["build-system"]["requires"],
    ]
    for line in wanted:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        if name == "wheel":
            continue  # setuptools builds wheels itself
        assert name in pins, f"{name} is not in {IMAGE_LOCK.name}: run scripts/lock_image_deps.py"
        assert requirement.specifier.contains(pins[name], prereleases=True), (line, pins[name])
    # Where this venv runs the locked version, what that version needs is locked too.
    for name, version in pins.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        if installed != version:
            continue
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                assert canonicalize_name(requirement.name) in pins, (name, requirement.name)


def test_image_ships_no_tests_benches_or_scripts() -> None:
    patterns = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {"tests", "bench", "scripts"} <= patterns
    sources = [a.split()[:-1] for kind, a in dockerfile_instructions() if kind == "COPY"]
    assert not [s for s in sources if {"tests", "bench", "scripts"} & set(s)]


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


def test_k8s_servers_expose_a_metrics_port_with_prometheus_scrape_annotations() -> None:
    for kind, name in (("Deployment", "reservoir-master"), ("DaemonSet", "reservoir-worker")):
        workload = k8s_workload(kind, name)
        container = main_container(workload)
        env = {e["name"]: e.get("value") for e in container["env"]}
        host, _, port = env["RESERVOIR_METRICS_LISTEN"].rpartition(":")
        assert host == "0.0.0.0", name
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["metrics"] == int(port) != ports["grpc"], name
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true", name
        assert annotations["prometheus.io/port"] == port, name
        assert annotations["prometheus.io/path"] == "/metrics", name


def test_k8s_runs_two_masters_on_different_nodes_each_advertising_its_pod_address() -> None:
    master = k8s_workload("Deployment", "reservoir-master")
    assert master["spec"]["replicas"] >= 2
    # A rollout adds a standby before it removes a master: never none left to lead.
    rollout = master["spec"]["strategy"]
    assert rollout["type"] == "RollingUpdate"
    assert rollout["rollingUpdate"]["maxUnavailable"] == 0
    pod = master["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    labels = master["spec"]["template"]["metadata"]["labels"]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    env = {e["name"]: e for e in main_container(master)["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    listen_port = env["RESERVOIR_MASTER_LISTEN"]["value"].rpartition(":")[2]
    assert env["RESERVOIR_MASTER_ADVERTISE"]["value"] == f"$(POD_IP):{listen_port}"


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


EXAMPLES = K8S_ROOT / "examples"


def quantity(value: str | int) -> float:
    """A Kubernetes quantity (500m, 2, 256Mi, 10Gi) as a number."""
    text = str(value)
    for suffix, factor in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40)):
        if text.endswith(suffix):
            return float(text.removesuffix(suffix)) * factor
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    return float(text)


def example_documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, doc)
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def test_k8s_every_container_has_resource_requests_and_limits() -> None:
    for filename, doc in [*k8s_documents(), *example_documents()]:
        for container in k8s_containers(doc):
            where = (filename, container["name"])
            resources = container.get("resources") or {}
            requests, limits = resources.get("requests", {}), resources.get("limits", {})
            assert {"cpu", "memory"} <= set(requests), where
            assert {"cpu", "memory"} <= set(limits), where
            for kind in ("cpu", "memory"):
                assert quantity(requests[kind]) <= quantity(limits[kind]), (where, kind)


def test_k8s_worker_memory_holds_its_cache_capacity_with_headroom() -> None:
    worker = main_container(k8s_workload("DaemonSet", "reservoir-worker"))
    env = {e["name"]: e.get("value") for e in worker["env"]}
    settings = config.load(config.WorkerConfig, {k: v for k, v in env.items() if v is not None})
    resources = worker["resources"]
    # Its /dev/shm blocks and spare block files count against its memory: the scheduler
    # must find room for them.
    held = settings.capacity_bytes + settings.spare_limit_bytes
    assert quantity(resources["requests"]["memory"]) >= held + 2**30
    assert quantity(resources["limits"]["memory"]) >= held + 2**30


def k8s_member_commands(container: dict[str, Any]) -> dict[str, list[str]]:
    """The etcd command as each StatefulSet pod runs it (the kubelet expands $(POD_NAME))."""
    return {
        pod: [arg.replace("$(POD_NAME)", pod) for arg in container["command"]]
        for pod in K8S_ETCD_PODS
    }


def test_k8s_etcd_is_three_members_of_one_cluster_that_compacts_behind_a_headless_service() -> None:
    etcd = k8s_workload("StatefulSet", "etcd")
    spec = etcd["spec"]
    assert [f"etcd-{n}" for n in range(spec["replicas"])] == list(K8S_ETCD_PODS)
    # All at once: a member of a new cluster is ready only once a quorum runs.
    assert spec["podManagementPolicy"] == "Parallel"
    container = main_container(etcd)
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    [service] = [
        doc
        for _, doc in k8s_documents()
        if doc["kind"] == "Service" and doc["metadata"]["name"] == spec["serviceName"]
    ]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert_members_form_one_cluster(
        k8s_member_commands(container), host=lambda pod: f"{pod}.{spec['serviceName']}"
    )
    # A member out of space still serves reads; a restart would free nothing.
    for probe in ("readinessProbe", "livenessProbe"):
        assert "exclude=NOSPACE" in container[probe]["httpGet"]["path"], probe
    [budget] = [doc for _, doc in k8s_documents() if doc["kind"] == "PodDisruptionBudget"
                and doc["metadata"]["name"] == "etcd"]  # fmt: skip
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_k8s_master_and_workers_are_given_every_etcd_member() -> None:
    assert metadata_endpoints(K8S_METADATA_URL) == [f"{pod}.etcd:2379" for pod in K8S_ETCD_PODS]
    for kind, name in (("Deployment", "reservoir-master"), ("DaemonSet", "reservoir-worker")):
        env = {e["name"]: e.get("value") for e in main_container(k8s_workload(kind, name))["env"]}
        assert env["RESERVOIR_METADATA_URL"] == K8S_METADATA_URL, kind


def test_k8s_masters_have_a_disruption_budget_that_drains_one_at_a_time() -> None:
    budgets = [doc for _, doc in k8s_documents() if doc["kind"] == "PodDisruptionBudget"]
    master = k8s_workload("Deployment", "reservoir-master")
    labels = master["spec"]["template"]["metadata"]["labels"]
    (budget,) = [
        b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ]
    assert budget["apiVersion"] == "policy/v1"
    # A drain takes one master at a time: another is always there to lead.
    replicas = master["spec"]["replicas"]
    assert budget["spec"].get("minAvailable") == replicas - 1 >= 1 or (
        budget["spec"].get("maxUnavailable") == 1
    )
    # A master that is not Ready anyway must not hold up a node drain.
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def training_example() -> dict[str, Any]:
    (job,) = [doc for _, doc in example_documents() if doc["kind"] == "Job"]
    return job


def test_k8s_example_training_job_reads_through_the_cluster_services() -> None:
    job = training_example()
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    assert not [r for r in kustomization["resources"] if "example" in r]
    assert job["metadata"]["namespace"] == kustomization["namespace"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    declared = declared_settings()
    assert {n for n in env if n.startswith("RESERVOIR_")} <= declared
    service = k8s_workload("Service", "reservoir-master")
    port = service["spec"]["ports"][0]["port"]
    assert env["RESERVOIR_MASTER"]["value"] == f"{service['metadata']['name']}:{port}"
    assert env["RESERVOIR_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # The workers' block files, read-only, as the workers' user: short-circuit reads.
    worker_pod = k8s_workload("DaemonSet", "reservoir-worker")["spec"]["template"]["spec"]
    worker_shm = {v["name"]: v for v in worker_pod["volumes"]}["shm-blocks"]["hostPath"]["path"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = container["volumeMounts"]
    assert volumes[mount["name"]]["hostPath"]["path"] == worker_shm == mount["mountPath"]
    assert mount["readOnly"] is True
    assert pod["securityContext"]["runAsUser"] == worker_pod["securityContext"]["runAsUser"]
    command = container["command"]
    assert command[:2] == ["python", "-c"]
    compile(command[2], "training-job.yaml", "exec")
    assert "from reservoir.client import Client" in command[2]


# --- shared by the secure variants -------------------------------------------------------

# The files `reservoir credentials create DIR` writes, by what they are for.
CREDENTIAL_FILES = {
    "RESERVOIR_TLS_CA": "ca.pem",
    "RESERVOIR_TLS_CERT": "server.pem",
    "RESERVOIR_TLS_KEY": "server-key.pem",
    "RESERVOIR_AUTH_TOKENS_FILE": "tokens.sha256",
}
CLIENT_TOKENS = ("admin.token", "reader.token")
# The master and workers reach etcd over TLS with the same CA, and the server certificate
# (made for client authentication too) as their client certificate.
ETCD_CLIENT_FILES = {
    "RESERVOIR_ETCD_CA": "ca.pem",
    "RESERVOIR_ETCD_CERT": "server.pem",
    "RESERVOIR_ETCD_KEY": "server-key.pem",
}
# etcd's own flags for its TLS files, and etcdctl's.
ETCD_SERVER_FLAGS = {
    "trusted-ca-file": "ca.pem",
    "cert-file": "server.pem",
    "key-file": "server-key.pem",
}
ETCDCTL_FLAGS = {"cacert": "ca.pem", "cert": "server.pem", "key": "server-key.pem"}


def long_flags(argv: list[str]) -> dict[str, str]:
    """`--name=value` and bare `--name` (as "true") options of a command line."""
    flags = {}
    for arg in argv:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            flags[name] = value or "true"
    return flags


def assert_etcd_serves_tls_to_clients(argv: list[str], files: dict[str, str]) -> None:
    """etcd's command line: https client URLs, a client certificate required, and its TLS
    flags naming the files `files` (path -> credentials file) holds."""
    flags = long_flags(argv)
    for option in ("listen-client-urls", "advertise-client-urls"):
        urls = flags[option].split(",")
        assert all(u.startswith("https://") for u in urls), (option, urls)
    assert flags.get("client-cert-auth") == "true", "etcd must require client certificates"
    for option, file in ETCD_SERVER_FLAGS.items():
        assert files.get(flags[option]) == file, option


def assert_etcdctl_checks_health_over_tls(argv: list[str], files: dict[str, str]) -> None:
    assert Path(argv[0]).name == "etcdctl" and argv[-2:] == ["endpoint", "health"], argv
    flags = long_flags(argv)
    assert flags["endpoints"] == "https://127.0.0.1:2379"
    for option, file in ETCDCTL_FLAGS.items():
        assert files.get(flags[option]) == file, option


def etcd_names_checked(env: dict[str, str]) -> set[str]:
    """The names a process checks in etcd's certificates: the one it is told to, or else
    the host of each endpoint it dials."""
    if env.get("RESERVOIR_ETCD_SERVER_NAME"):
        return {env["RESERVOIR_ETCD_SERVER_NAME"]}
    return {e.rpartition(":")[0] for e in metadata_endpoints(env["RESERVOIR_METADATA_URL"])}


def certificate_names_and_usages(cert: Path) -> tuple[set[str], set[str]]:
    """The SANs and extended key usages of a PEM certificate."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.x509.oid import ExtendedKeyUsageOID

    parsed = x509.load_pem_x509_certificate(cert.read_bytes())
    sans = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = {str(n) for n in sans.get_values_for_type(x509.DNSName)}
    names |= {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    eku = parsed.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    usages = {
        label
        for label, oid in (
            ("serverAuth", ExtendedKeyUsageOID.SERVER_AUTH),
            ("clientAuth", ExtendedKeyUsageOID.CLIENT_AUTH),
        )
        if oid in eku
    }
    return names, usages


def commented_commands(path: Path) -> list[str]:
    """The shell commands shown in a file's comments, continuation lines joined."""
    commands, current = [], ""
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text.startswith("#"):
            current = ""
            continue
        text = text.lstrip("#").strip()
        if current:
            current += " " + text
        elif text.startswith(("reservoir ", "kubectl ", "docker-compose ")):
            current = text
        else:
            continue
        if current.endswith("\\"):
            current = current[:-1].rstrip()
        else:
            commands.append(current)
            current = ""
    return commands


def credentials_command(path: Path) -> dict[str, str]:
    """The options of the `reservoir credentials create` command a file documents."""
    found = [c for c in commented_commands(path) if c.startswith("reservoir credentials create")]
    assert len(found) == 1, f"{path.name} documents no single `reservoir credentials create`"
    argv = shlex.split(found[0])
    options = {"dir": argv[3]}
    for flag, value in zip(argv[4::2], argv[5::2], strict=True):
        options[flag.removeprefix("--")] = value
    return options


def run_credentials_create(directory: Path, workers: str, hosts: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "credentials", "create", str(directory),
         "--workers", workers, "--hosts", hosts],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_cli_has_the_health_command_the_secure_probes_run() -> None:
    from reservoir.cli.main import build_parser

    args = build_parser().parse_args(["health", "--server-only", "127.0.0.1:19998"])
    assert args.address == "127.0.0.1:19998" and callable(args.func) and args.server_only
    assert "reservoir" in console_scripts()


# --- docker-compose.secure.yml -------------------------------------------------------------


def load_secure_compose() -> dict[str, Any]:
    return yaml.safe_load(SECURE_COMPOSE_FILE.read_text())


def merged_compose_services() -> dict[str, dict[str, Any]]:
    """The services as `docker-compose -f docker-compose.yml -f docker-compose.secure.yml`
    sees them: environments and healthchecks merged, other keys of the override win."""
    base = load_compose()["services"]
    override = load_secure_compose()["services"]
    merged = {}
    for name in set(base) | set(override):
        service = dict(base.get(name, {}))
        for key, value in override.get(name, {}).items():
            if key == "environment":
                service[key] = {**compose_env(service), **compose_env({key: value})}
            elif key == "healthcheck":
                service[key] = {**service.get(key, {}), **value}
            else:
                service[key] = value
        merged[name] = service
    return merged


def compose_secret_file(secret: str) -> str:
    """The file under ./credentials a compose secret is made of."""
    definition = load_secure_compose()["secrets"][secret]
    path = Path(definition["file"])
    assert path.parent == Path("credentials"), f"{secret}: not in ./credentials"
    return path.name


def compose_secret_files(service: dict[str, Any]) -> dict[str, str]:
    """/run/secrets/NAME -> the credentials file it holds, for one service."""
    names = [s if isinstance(s, str) else s["source"] for s in service.get("secrets", [])]
    return {f"/run/secrets/{name}": compose_secret_file(name) for name in names}


def test_docker_compose_config_validates_the_secure_override() -> None:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    result = subprocess.run(
        [binary, "-f", str(COMPOSE_FILE), "-f", str(SECURE_COMPOSE_FILE), "config"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]
    merged = merged_compose_services()
    for name in (*ETCD_MEMBERS, *MASTERS, *WORKERS):
        assert compose_env(resolved[name]) == compose_env(merged[name]), name
        assert resolved[name]["healthcheck"]["test"] == merged[name]["healthcheck"]["test"]
        assert {s["source"] for s in resolved[name]["secrets"]} == set(merged[name]["secrets"])
    for name in ETCD_MEMBERS:
        assert command_argv(resolved[name]["command"]) == command_argv(merged[name]["command"])


def test_secure_compose_sets_only_reservoir_variables_that_config_declares() -> None:
    declared = declared_settings()
    used = {
        (name, var)
        for name, service in load_secure_compose()["services"].items()
        for var in compose_env(service)
        if var.startswith("RESERVOIR_")
    }
    assert used
    unknown = sorted((name, var) for name, var in used if var not in declared)
    assert not unknown, f"not settings in reservoir.common.config: {unknown}"


def test_secure_compose_servers_read_tls_files_and_their_own_token_from_secrets() -> None:
    services = merged_compose_services()
    for name in (*MASTERS, *WORKERS):
        env = compose_env(services[name])
        files = compose_secret_files(services[name])
        for setting, file in CREDENTIAL_FILES.items():
            assert files.get(env[setting]) == file, (name, setting)
        own = "master.token" if name in MASTERS else f"{env['RESERVOIR_WORKER_ID']}.token"
        assert files.get(env["RESERVOIR_TOKEN_FILE"]) == own, name
        # A server holds its own token only: no other worker's, no admin or reader token.
        tokens = {f for f in files.values() if f.endswith(".token")}
        assert tokens == {own}, name


def test_secure_compose_etcd_members_serve_clients_over_tls_with_the_secrets_they_mount() -> None:
    services = merged_compose_services()
    commands = {name: command_argv(services[name]["command"]) for name in ETCD_MEMBERS}
    assert_members_form_one_cluster(commands, host=lambda name: name, scheme="https")
    for name in ETCD_MEMBERS:
        etcd = services[name]
        files = compose_secret_files(etcd)
        # Docker secrets are read-only bind mounts; etcd gets the TLS files and no token.
        assert set(files.values()) == {"ca.pem", "server.pem", "server-key.pem"}
        assert_etcd_serves_tls_to_clients(command_argv(etcd["command"]), files)
        # The override restates the base's whole command: only the client side changes.
        base = long_flags(command_argv(load_compose()["services"][name]["command"]))
        ours = long_flags(command_argv(etcd["command"]))
        for option in (
            "name", "data-dir", "initial-cluster", "initial-cluster-state",
            "initial-cluster-token", "auto-compaction-mode", "auto-compaction-retention",
        ):  # fmt: skip
            assert ours[option] == base[option], (name, option)
        test = etcd["healthcheck"]["test"]
        assert test[0] == "CMD", "the etcd image has no shell"
        assert_etcdctl_checks_health_over_tls(test[1:], files)
        assert etcd["healthcheck"].get("interval")


def test_secure_compose_servers_reach_etcd_over_tls_with_the_server_certificate(
    tmp_path: Path,
) -> None:
    services = merged_compose_services()
    options = credentials_command(SECURE_COMPOSE_FILE)
    run_credentials_create(tmp_path, options["workers"], options["hosts"])
    names, usages = certificate_names_and_usages(tmp_path / "server.pem")
    # etcd presents it as a server certificate, the master and workers as a client one.
    assert usages == {"serverAuth", "clientAuth"}
    for name in ("master", *WORKERS):
        env = compose_env(services[name])
        files = compose_secret_files(services[name])
        for setting, file in ETCD_CLIENT_FILES.items():
            assert files.get(env[setting]) == file, (name, setting)
        assert env["RESERVOIR_METADATA_URL"] == COMPOSE_METADATA_URL, name
        for checked in etcd_names_checked(env):
            assert checked in options["hosts"].split(","), (name, checked)
            assert checked in names, (name, checked)


def test_secure_compose_defines_every_secret_it_uses_and_uses_every_one_it_defines() -> None:
    defined = set(load_secure_compose()["secrets"])
    used = {
        s if isinstance(s, str) else s["source"]
        for service in load_secure_compose()["services"].values()
        for s in service.get("secrets", [])
    }
    assert used == defined


def test_secure_compose_credentials_stay_out_of_git_and_of_the_image() -> None:
    gitignore = (REPO / ".gitignore").read_text().split()
    dockerignore = (REPO / ".dockerignore").read_text().split()
    assert "/credentials/" in gitignore or "credentials/" in gitignore
    assert "credentials" in dockerignore


def test_secure_compose_healthchecks_speak_tls_to_the_port_each_server_listens_on() -> None:
    services = merged_compose_services()
    for name in MASTERS:
        master_port = compose_env(services[name])["RESERVOIR_MASTER_LISTEN"].rpartition(":")[2]
        assert services[name]["healthcheck"]["test"] == [
            "CMD", "reservoir", "health", "--server-only", f"127.0.0.1:{master_port}",
        ]  # fmt: skip
    for name in WORKERS:
        port = compose_env(services[name])["RESERVOIR_WORKER_LISTEN"].rpartition(":")[2]
        test = services[name]["healthcheck"]["test"]
        assert test == ["CMD", "reservoir", "health", "--server-only", f"127.0.0.1:{port}"], name
        assert services[name]["healthcheck"].get("interval"), name


def test_secure_compose_cli_service_alone_carries_the_admin_token_and_up_skips_it() -> None:
    services = merged_compose_services()
    cli = services["cli"]
    assert cli.get("profiles"), "`up` must not start the one-off cli service"
    env = compose_env(cli)
    files = compose_secret_files(cli)
    assert files[env["RESERVOIR_TLS_CA"]] == "ca.pem"
    assert files[env["RESERVOIR_TOKEN_FILE"]] == "admin.token"
    assert env["RESERVOIR_MASTER"] == compose_env(services["worker1"])["RESERVOIR_MASTER"]
    assert command_argv(cli["command"])[0] in console_scripts()
    for name in (*MASTERS, *WORKERS):
        assert not set(compose_secret_files(services[name]).values()) & set(CLIENT_TOKENS)


def test_secure_compose_documented_credentials_command_writes_every_secret_file(
    tmp_path: Path,
) -> None:
    options = credentials_command(SECURE_COMPOSE_FILE)
    assert Path(options["dir"]) == Path("credentials")
    services = merged_compose_services()
    ids = [compose_env(services[name])["RESERVOIR_WORKER_ID"] for name in WORKERS]
    assert options["workers"].split(",") == ids
    # The certificate covers every name a server is dialled by on the compose network.
    hosts = set(options["hosts"].split(","))
    dialled = {
        address.rpartition(":")[0]
        for n in WORKERS
        for address in compose_env(services[n])["RESERVOIR_MASTER"].split(",")
    }
    dialled |= {
        compose_env(services[n])["RESERVOIR_WORKER_ADVERTISE"].rpartition(":")[0] for n in WORKERS
    }
    assert dialled <= hosts
    run_credentials_create(tmp_path / "credentials", options["workers"], options["hosts"])
    for secret in load_secure_compose()["secrets"]:
        assert (tmp_path / "credentials" / compose_secret_file(secret)).is_file(), secret


# --- Kubernetes: the secure overlay --------------------------------------------------------


def secure_kustomization() -> dict[str, Any]:
    return yaml.safe_load((K8S_SECURE / "kustomization.yaml").read_text())


GATEWAY_WORKLOAD = "reservoir-gateway"


def secure_patches() -> dict[str, dict[str, Any]]:
    """The overlay's patches of the cluster's servers by workload kind (the S3 gateway's,
    a second Deployment, is `gateway_patch()`)."""
    patches = {}
    for entry in secure_kustomization()["patches"]:
        doc = yaml.safe_load((K8S_SECURE / entry["path"]).read_text())
        if doc["metadata"]["name"] != GATEWAY_WORKLOAD:
            patches[doc["kind"]] = doc
    return patches


def gateway_patch() -> dict[str, Any]:
    for entry in secure_kustomization()["patches"]:
        doc = yaml.safe_load((K8S_SECURE / entry["path"]).read_text())
        if doc["metadata"]["name"] == GATEWAY_WORKLOAD:
            return dict(doc)
    raise AssertionError("the secure overlay does not patch the S3 gateway")


def server_patches() -> dict[str, dict[str, Any]]:
    """The master's and the workers' patches (not etcd's)."""
    return {k: v for k, v in secure_patches().items() if k in {"Deployment", "DaemonSet"}}


def documented_secrets() -> dict[str, set[str]]:
    """Secret name -> the keys (file names) the overlay's `kubectl create secret` commands
    give it; `{node}.token` stands for one file per node."""
    secrets: dict[str, set[str]] = {}
    for command in commented_commands(K8S_SECURE / "kustomization.yaml"):
        match = re.search(r"create secret generic (\S+)", command)
        if not match:
            continue
        keys = {Path(f).name for f in re.findall(r"--from-file=(\S+)", command)}
        secrets[match.group(1)] = {k.replace("%s", "{node}") for k in keys}
    return secrets


def volume_keys(volume: dict[str, Any]) -> set[str]:
    """The files a secret or projected volume shows, by the documented secrets' keys."""
    secrets = documented_secrets()
    sources = (
        [s["secret"] | {"secretName": s["secret"]["name"]} for s in volume["projected"]["sources"]]
        if "projected" in volume
        else [volume["secret"]]
    )
    keys: set[str] = set()
    for source in sources:
        assert source["secretName"] in secrets, f"{source['secretName']} is created nowhere"
        available = secrets[source["secretName"]]
        items = source.get("items")
        if items:
            for item in items:
                assert item["key"] in available, (source["secretName"], item["key"])
                assert item["path"] == item["key"]
            keys |= {item["path"] for item in items}
        else:
            keys |= available
    return keys


def read_only_secret_files(doc: dict[str, Any]) -> dict[str, str]:
    """Path -> credentials file, for the Secret files a workload's main container mounts
    read-only."""
    volumes = {v["name"]: v for v in doc["spec"]["template"]["spec"].get("volumes", [])}
    files = {}
    for mount in main_container(doc).get("volumeMounts", []):
        volume = volumes.get(mount["name"], {})
        if mount.get("readOnly") is True and ("secret" in volume or "projected" in volume):
            for key in volume_keys(volume):
                files[f"{mount['mountPath']}/{key}"] = key
    return files


def test_k8s_plain_kustomization_is_the_base_and_the_overlay_builds_on_it() -> None:
    plain = yaml.safe_load((K8S_ROOT / "kustomization.yaml").read_text())
    assert plain["resources"] == ["base"]
    assert secure_kustomization()["resources"] == ["../base"]
    base = {
        (doc["kind"], doc["metadata"]["name"])
        for _, doc in k8s_documents()
        if doc["kind"] != "Kustomization"
    }
    patches = secure_patches()
    assert set(patches) == {"Deployment", "DaemonSet", "StatefulSet"}
    for kind, doc in patches.items():
        assert (kind, doc["metadata"]["name"]) in base
        base_container = main_container(k8s_workload(kind, doc["metadata"]["name"]))
        assert main_container(doc)["name"] == base_container["name"]


def test_k8s_secure_overlay_sets_only_reservoir_variables_that_config_declares() -> None:
    declared = declared_settings()
    used = {
        (kind, var["name"])
        for kind, doc in server_patches().items()
        for var in main_container(doc)["env"]
        if var["name"].startswith("RESERVOIR_")
    }
    assert used
    unknown = sorted(item for item in used if item[1] not in declared)
    assert not unknown, f"not settings in reservoir.common.config: {unknown}"


def test_k8s_secure_servers_read_tls_and_tokens_from_read_only_secret_mounts() -> None:
    for kind, doc in server_patches().items():
        container = main_container(doc)
        env = {e["name"]: e.get("value") for e in container["env"]}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in doc["spec"]["template"]["spec"]["volumes"]}
        for setting in (*CREDENTIAL_FILES, *ETCD_CLIENT_FILES, "RESERVOIR_TOKEN_FILE"):
            path = Path(env[setting])
            mount = mounts[str(path.parent)]
            assert mount["readOnly"] is True, (kind, setting)
            shown = volume_keys(volumes[mount["name"]])
            expected = (CREDENTIAL_FILES | ETCD_CLIENT_FILES).get(setting) or (
                "master.token" if kind == "Deployment" else "$(NODE_NAME).token"
            )
            assert path.name == expected, (kind, setting)
            assert path.name.replace("$(NODE_NAME)", "{node}") in shown, (kind, setting)
        for volume in volumes.values():
            mode = (volume.get("secret") or volume.get("projected"))["defaultMode"]
            assert mode & 0o007 == 0, f"{kind} {volume['name']}: world-readable secrets"


def test_k8s_secure_secret_files_are_readable_by_the_images_user_only() -> None:
    uid = re.search(r"--uid (\d+)", DOCKERFILE.read_text())
    assert uid
    for kind, doc in server_patches().items():
        context = doc["spec"]["template"]["spec"]["securityContext"]
        assert context["fsGroup"] == int(uid.group(1)), kind


def test_k8s_secure_each_server_sees_only_the_tokens_it_needs() -> None:
    patches = secure_patches()

    def tokens(kind: str) -> set[str]:
        volumes = patches[kind]["spec"]["template"]["spec"]["volumes"]
        return {k for v in volumes for k in volume_keys(v) if k.endswith(".token")}

    assert tokens("Deployment") == {"master.token"}
    assert tokens("DaemonSet") == {"{node}.token"}
    documented = set().union(*documented_secrets().values())
    assert not documented & set(CLIENT_TOKENS), "admin/reader tokens belong to no server Pod"


def test_k8s_secure_worker_token_is_named_after_its_node_which_is_its_worker_id() -> None:
    container = main_container(secure_patches()["DaemonSet"])
    names = [e["name"] for e in container["env"]]
    node = next(e for e in container["env"] if e["name"] == "NODE_NAME")
    assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # Defined before its use in the patch, and new to the base, so it stays before it
    # whether kustomize puts the patch's new variables first or last.
    assert names.index("NODE_NAME") < names.index("RESERVOIR_TOKEN_FILE")
    base = main_container(k8s_workload("DaemonSet", "reservoir-worker"))
    assert "NODE_NAME" not in {e["name"] for e in base["env"]}
    base_id = next(e for e in base["env"] if e["name"] == "RESERVOIR_WORKER_ID")
    assert base_id["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_k8s_secure_probes_run_reservoir_health_on_the_listen_port() -> None:
    for kind, doc in server_patches().items():
        container = main_container(doc)
        base = main_container(k8s_workload(kind, doc["metadata"]["name"]))
        listen = "RESERVOIR_MASTER_LISTEN" if kind == "Deployment" else "RESERVOIR_WORKER_LISTEN"
        port = {e["name"]: e.get("value") for e in base["env"]}[listen].rpartition(":")[2]
        for probe in ("readinessProbe", "livenessProbe"):
            patch = container[probe]
            # `grpc: null` removes the base's plaintext gRPC probe.
            assert "grpc" in patch and patch["grpc"] is None, (kind, probe)
            # The server alone: a master whose etcd is full or away still serves reads, and
            # restarting or unrouting it would not bring etcd back.
            command = ["reservoir", "health", "--server-only", f"127.0.0.1:{port}"]
            assert patch["exec"]["command"] == command


def test_k8s_secure_every_process_checks_a_name_the_certificate_is_made_for(
    tmp_path: Path,
) -> None:
    names = {
        kind: {e["name"]: e.get("value") for e in main_container(doc)["env"]}[
            "RESERVOIR_TLS_SERVER_NAME"
        ]
        for kind, doc in server_patches().items()
    }
    assert len(set(names.values())) == 1, names
    options = credentials_command(K8S_SECURE / "kustomization.yaml")
    hosts = options["hosts"].split(",")
    assert names["Deployment"] in hosts
    master_service = "reservoir-master"
    assert master_service in hosts
    assert "kubectl get nodes" in options["workers"], "one worker token per node"
    # What the documented commands put into the Secrets is what the CLI writes.
    run_credentials_create(tmp_path / "credentials", "node-a,node-b", options["hosts"])
    for secret, keys in documented_secrets().items():
        for key in keys:
            for node in ("node-a", "node-b"):
                assert (tmp_path / "credentials" / key.format(node=node)).is_file(), secret


def test_k8s_secure_gateway_serves_https_checks_signatures_and_reads_with_its_own_token() -> None:
    patch = gateway_patch()
    container = main_container(patch)
    base = main_container(k8s_workload("Deployment", GATEWAY_WORKLOAD))
    assert container["name"] == base["name"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert set(env) <= declared_settings()
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in patch["spec"]["template"]["spec"]["volumes"]}
    expected = {
        "RESERVOIR_TLS_CA": "ca.pem",
        "RESERVOIR_TLS_CERT": "server.pem",
        "RESERVOIR_TLS_KEY": "server-key.pem",
        "RESERVOIR_TOKEN_FILE": "gateway.token",
        "RESERVOIR_GATEWAY_KEYS_FILE": "gateway-keys",
    }
    for setting, file in expected.items():
        path = Path(env[setting])
        assert path.name == file, setting
        mount = mounts[str(path.parent)]
        assert mount["readOnly"] is True, setting
        assert file in volume_keys(volumes[mount["name"]]), setting
    tokens = {k for v in volumes.values() for k in volume_keys(v) if k.endswith(".token")}
    assert tokens == {"gateway.token"}  # never the operators' admin or reader token
    for volume in volumes.values():
        assert volume["secret"]["defaultMode"] & 0o007 == 0, volume["name"]
    assert patch["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 10001


def test_k8s_secure_etcd_serves_clients_over_tls_from_a_read_only_secret_mount() -> None:
    patch = secure_patches()["StatefulSet"]
    base = k8s_workload("StatefulSet", patch["metadata"]["name"])
    container = main_container(patch)
    files = read_only_secret_files(patch)
    # reservoir-tls (CA, certificate, key) and no token.
    assert set(files.values()) == {"ca.pem", "server.pem", "server-key.pem"}
    assert_etcd_serves_tls_to_clients(container["command"], files)
    # The patch restates the base's whole command (lists are replaced): only the client
    # side changes.
    ours, theirs = long_flags(container["command"]), long_flags(main_container(base)["command"])
    assert container["command"][0] == main_container(base)["command"][0]
    for option in (
        "name", "data-dir", "initial-cluster", "initial-cluster-state",
        "initial-cluster-token", "auto-compaction-mode", "auto-compaction-retention",
    ):  # fmt: skip
        assert ours[option] == theirs[option], option
    assert_members_form_one_cluster(
        k8s_member_commands(container), host=lambda pod: f"{pod}.etcd", scheme="https"
    )
    for probe in ("readinessProbe", "livenessProbe"):
        # `httpGet: null` removes the base's plaintext probe.
        assert "httpGet" in container[probe] and container[probe]["httpGet"] is None, probe
        assert_etcdctl_checks_health_over_tls(container[probe]["exec"]["command"], files)
        assert container[probe]["timeoutSeconds"] >= 2, "etcdctl dials with a 2 s timeout"
    for volume in patch["spec"]["template"]["spec"]["volumes"]:
        assert volume["secret"]["defaultMode"] & 0o007 == 0, "world-readable secrets"
    # The etcd image's user is root, which reads the 0440 files; a non-root etcd would need
    # the servers' fsGroup.
    pods = [patch["spec"]["template"]["spec"], base["spec"]["template"]["spec"]]
    contexts = [p.get("securityContext") or {} for p in pods]
    contexts += [c.get("securityContext") or {} for c in (container, main_container(base))]
    if any(c.get("runAsNonRoot") or c.get("runAsUser") for c in contexts):
        uid = re.search(r"--uid (\d+)", DOCKERFILE.read_text())
        assert uid and any(c.get("fsGroup") == int(uid.group(1)) for c in contexts)


def test_k8s_secure_servers_reach_etcd_over_tls_by_a_name_in_the_certificate(
    tmp_path: Path,
) -> None:
    options = credentials_command(K8S_SECURE / "kustomization.yaml")
    run_credentials_create(tmp_path, "node-a", options["hosts"])
    names, usages = certificate_names_and_usages(tmp_path / "server.pem")
    # etcd presents it as a server certificate, the master and workers as a client one.
    assert usages == {"serverAuth", "clientAuth"}
    for kind, doc in server_patches().items():
        files = read_only_secret_files(doc)
        patched = {e["name"]: e.get("value") for e in main_container(doc)["env"]}
        for setting, file in ETCD_CLIENT_FILES.items():
            assert files.get(patched[setting]) == file, (kind, setting)
        base = main_container(k8s_workload(kind, doc["metadata"]["name"]))
        env = {e["name"]: e.get("value") for e in base["env"]} | patched
        assert env["RESERVOIR_METADATA_URL"] == K8S_METADATA_URL, kind
        for checked in etcd_names_checked(env):
            assert checked in options["hosts"].split(","), (kind, checked)
            assert checked in names, (kind, checked)


def test_kubectl_kustomize_renders_the_plain_and_the_secure_cluster() -> None:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not installed")

    def render(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
        result = subprocess.run(
            [binary, "kustomize", str(path)], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        return {
            (d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(result.stdout) if d
        }

    plain, secure = render(K8S_ROOT), render(K8S_SECURE)
    assert set(plain) == set(secure)
    for key in (("Deployment", "reservoir-master"), ("DaemonSet", "reservoir-worker")):
        assert secure[key]["metadata"]["namespace"] == "reservoir"
        pod = secure[key]["spec"]["template"]["spec"]
        container = pod["containers"][0]
        names = [e["name"] for e in container["env"]]
        assert len(names) == len(set(names)), key
        for e in container["env"]:
            for ref in re.findall(r"\$\((\w+)\)", e.get("value", "")):
                assert names.index(ref) < names.index(e["name"]), (key, e["name"])
        for probe in ("readinessProbe", "livenessProbe"):
            assert set(container[probe]) & {"grpc", "exec"} == {"exec"}, (key, probe)
        volumes = {v["name"] for v in pod["volumes"]}
        assert {m["name"] for m in container["volumeMounts"]} <= volumes
        assert "RESERVOIR_TLS_CA" not in {
            e["name"] for e in plain[key]["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert set(ETCD_CLIENT_FILES) <= set(names), key
    etcd_pod = secure[("StatefulSet", "etcd")]["spec"]["template"]["spec"]
    etcd = etcd_pod["containers"][0]
    assert long_flags(etcd["command"]).get("client-cert-auth") == "true"
    for probe in ("readinessProbe", "livenessProbe"):
        assert set(etcd[probe]) & {"httpGet", "exec"} == {"exec"}, probe
    claims = secure[("StatefulSet", "etcd")]["spec"].get("volumeClaimTemplates", [])
    volumes = {v["name"] for v in etcd_pod["volumes"]} | {c["metadata"]["name"] for c in claims}
    assert {m["name"] for m in etcd["volumeMounts"]} <= volumes
    plain_etcd = plain[("StatefulSet", "etcd")]["spec"]["template"]["spec"]["containers"][0]
    assert "client-cert-auth" not in long_flags(plain_etcd["command"])


# --- scale-in with drain ------------------------------------------------------------------


def test_compose_workers_get_longer_to_stop_than_their_drain_on_sigterm_may_take() -> None:
    services = load_compose()["services"]
    for name in WORKERS:
        drain_s = config.parse_duration(
            compose_env(services[name])["RESERVOIR_WORKER_DRAIN_TIMEOUT"]
        )
        grace_s = config.parse_duration(services[name]["stop_grace_period"])
        assert 0 < drain_s < grace_s, name


def test_k8s_worker_drains_itself_in_pre_stop_within_its_termination_grace_period() -> None:
    worker = k8s_workload("DaemonSet", "reservoir-worker")
    container = main_container(worker)
    env = {e["name"]: e.get("value") for e in container["env"]}
    hook = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    # The worker's own id (a worker's token may drain only itself), as the shell expands it.
    assert 'reservoir drain "$RESERVOIR_WORKER_ID" --wait --timeout ' in hook
    hook_s = config.parse_duration(hook.rpartition("--timeout ")[2].split()[0])
    drain_s = config.parse_duration(env["RESERVOIR_WORKER_DRAIN_TIMEOUT"])
    grace_s = worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert hook_s + drain_s < grace_s
