"""`reservoir credentials create`, `reservoir token new|hash` and `reservoir health`, run as an
operator runs them (a subprocess); the files they write are then used as a cluster would."""

from __future__ import annotations

import ipaddress
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from reservoir.common.serving.auth import Principal, TokenTable, token_hash

x509 = pytest.importorskip("cryptography.x509")
verification = pytest.importorskip("cryptography.x509.verification")

WORKERS = ("worker1", "worker2", "node-a.example")
HOSTS = ("master", "worker1", "reservoir-master.reservoir.svc", "10.20.30.40")


def _cli(
    *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env if env is not None else _clean_env(),
    )


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RESERVOIR_")}


@pytest.fixture(scope="module")
def creds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("creds") / "cluster"
    done = _cli(
        "credentials", "create", str(directory), "--workers", ",".join(WORKERS),
        "--hosts", ",".join(HOSTS), "--days", "90",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    directory.joinpath("stdout").write_text(done.stdout + done.stderr)
    return directory


def _verifier(ca: Path, name: x509.GeneralName) -> object:
    store = verification.Store([x509.load_pem_x509_certificate(ca.read_bytes())])
    return verification.PolicyBuilder().store(store).build_server_verifier(name)


def _name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def test_credentials_create_writes_a_cert_valid_for_the_requested_hosts_and_loopback(
    creds: Path,
) -> None:
    leaf = x509.load_pem_x509_certificate((creds / "server.pem").read_bytes())
    for host in (*HOSTS, "localhost", "127.0.0.1"):
        chain = _verifier(creds / "ca.pem", _name(host)).verify(leaf, [])  # type: ignore[attr-defined]
        assert len(chain) == 2, host
    for host in ("elsewhere.example", "10.20.30.41"):
        with pytest.raises(verification.VerificationError):
            _verifier(creds / "ca.pem", _name(host)).verify(leaf, [])  # type: ignore[attr-defined]
    days = (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days
    assert 89 <= days <= 90


def test_credentials_create_writes_tokens_the_tokens_file_accepts_with_their_roles(
    creds: Path,
) -> None:
    table = TokenTable.load(str(creds / "tokens.sha256"))
    expected = {
        "admin": Principal("admin"),
        "reader": Principal("reader"),
        "writer": Principal("writer"),
        "master": Principal("worker", "master"),
        "gateway": Principal("writer", "gateway"),
        **{w: Principal("worker", w) for w in WORKERS},
    }
    assert len(table) == len(expected)
    hashes = (creds / "tokens.sha256").read_text()
    printed = (creds / "stdout").read_text()
    for name, principal in expected.items():
        token = (creds / f"{name}.token").read_text().strip()
        assert table.principal(token) == principal, name
        # Servers hold hashes only; the command prints paths, never a token.
        assert token not in hashes and token not in printed


def test_credentials_create_keeps_keys_and_tokens_private(creds: Path) -> None:
    for name in ("server-key.pem", "admin.token", "reader.token", "master.token", "worker1.token"):
        assert stat.S_IMODE((creds / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE((creds / "ca.pem").stat().st_mode) == 0o644


def test_credentials_create_json_lists_every_file(tmp_path: Path) -> None:
    done = _cli("--json", "credentials", "create", str(tmp_path / "c"), "--workers", "w1")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert set(listing["tokens"]) == {"admin", "reader", "writer", "master", "gateway", "w1"}
    assert listing["hosts"] == ["localhost", "127.0.0.1", "::1"]
    for path in (listing["ca"], listing["cert"], listing["key"], listing["tokens_file"]):
        assert Path(path).is_file()


def test_credentials_create_refuses_to_overwrite_or_to_take_unusable_worker_ids(
    tmp_path: Path,
) -> None:
    target = tmp_path / "c"
    assert _cli("credentials", "create", str(target), "--workers", "w1").returncode == 0
    ca = (target / "ca.pem").read_bytes()
    again = _cli("credentials", "create", str(target), "--workers", "w1")
    assert again.returncode == 1 and "--force" in again.stderr
    assert (target / "ca.pem").read_bytes() == ca
    forced = _cli("credentials", "create", str(target), "--workers", "w1", "--force")
    assert forced.returncode == 0 and (target / "ca.pem").read_bytes() != ca
    for bad in ("admin", "a b", "../x", "w1,w1", ""):
        done = _cli("credentials", "create", str(tmp_path / "bad"), "--workers", bad)
        assert done.returncode == 1, bad
        assert done.stderr.startswith("reservoir: error:"), bad


def test_token_new_prints_the_token_on_stdout_and_its_tokens_file_line_on_stderr() -> None:
    done = _cli("token", "new", "--role", "worker", "--subject", "node-7")
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert token.startswith("rsv_") and len(token) > 40
    line = done.stderr.strip()
    assert token not in line
    table = TokenTable.parse([line])
    assert table.principal(token) == Principal("worker", "node-7")
    hashed = _cli("token", "hash", stdin=token + "\n")
    assert hashed.returncode == 0
    assert hashed.stdout.strip() == token_hash(token) == line.split()[1]


def test_token_new_for_a_reader_and_refusals() -> None:
    done = _cli("token", "new", "--role", "reader")
    assert done.returncode == 0
    assert TokenTable.parse([done.stderr]).principal(done.stdout.strip()) == Principal("reader")
    assert _cli("token", "new", "--role", "worker").returncode == 1  # a worker needs a subject
    no_role = _cli("token", "new", "--role", "root")  # argparse: no such role, in one line
    assert no_role.returncode == 1 and no_role.stderr.count("\n") == 1
    assert _cli("token", "hash", stdin="").returncode == 1


@pytest.fixture
def tls_health_server(creds: Path) -> Iterator[int]:
    """A server with the generated certificate and the standard health service."""
    from grpc_health.v1 import health, health_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    credentials = grpc.ssl_server_credentials(
        [((creds / "server-key.pem").read_bytes(), (creds / "server.pem").read_bytes())]
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        yield port
    finally:
        server.stop(None)


def test_health_checks_a_tls_server_the_way_the_deployment_probes_do(
    creds: Path, tls_health_server: int
) -> None:
    address = f"127.0.0.1:{tls_health_server}"
    # As in docker-compose.secure.yml: the server's own settings, dialling 127.0.0.1.
    env = {
        **_clean_env(),
        "RESERVOIR_TLS_CA": str(creds / "ca.pem"),
        "RESERVOIR_TLS_CERT": str(creds / "server.pem"),
        "RESERVOIR_TLS_KEY": str(creds / "server-key.pem"),
        "RESERVOIR_TOKEN_FILE": str(creds / "worker1.token"),
    }
    done = _cli("health", address, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SERVING"
    # As on Kubernetes: the name checked is the one every process is told to expect.
    named = {**env, "RESERVOIR_TLS_SERVER_NAME": "reservoir-master.reservoir.svc"}
    assert _cli("health", address, env=named).returncode == 0
    wrong = _cli("health", address, env={**env, "RESERVOIR_TLS_SERVER_NAME": "elsewhere"})
    assert wrong.returncode == 1 and "UNAVAILABLE" in wrong.stderr
    # Plaintext against a TLS server fails, and says so.
    plain = _cli("health", address, "--timeout", "2")
    assert plain.returncode == 1 and plain.stderr.strip()
