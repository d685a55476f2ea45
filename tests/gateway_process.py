"""A `reservoir gateway` process over a test cluster, as an operator runs one: its own
process, a free port, the cluster's CA and the gateway's token when the cluster is secure."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from reservoir.local.cluster import LocalCluster
from reservoir.local.process import free_port
from tests.eventually import eventually


def _answers(url: str, ca: str | None) -> bool:
    context = ssl.create_default_context(cafile=ca) if ca else None
    try:
        with urllib.request.urlopen(url + "/", timeout=2, context=context):
            return True
    except urllib.error.HTTPError:
        return True  # an S3 error answer (AccessDenied when signatures are checked)


@contextmanager
def running_gateway(
    cluster: LocalCluster, log: Path, env: dict[str, str] | None = None, ca: str | None = None
) -> Iterator[str]:
    """Starts a gateway reading through `cluster`; yields its URL (https when `env` gives
    it a certificate, then `ca` is what a client trusts)."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RESERVOIR_TOKEN")}
    environ |= {
        "RESERVOIR_MASTER": cluster.master_address,
        "RESERVOIR_LOG_FORMAT": "json",
    }
    creds = cluster.credentials
    if creds is not None:  # the gateway's own token (role writer), never an admin's
        environ |= {
            "RESERVOIR_TLS_CA": str(creds.ca),
            "RESERVOIR_TOKEN_FILE": str(creds.token("gateway")),
        }
    environ |= env or {}
    scheme = "https" if "RESERVOIR_GATEWAY_TLS_CERT" in environ else "http"
    url = f"{scheme}://127.0.0.1:{port}"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            # The command an operator types (`reservoir local up --gateway` runs the module,
            # `python -m reservoir.gateway`, with the same settings from its environment).
            [
                sys.executable,
                "-m",
                "reservoir.cli.main",
                "gateway",
                "--listen",
                f"127.0.0.1:{port}",
            ],
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        eventually(
            lambda: proc.poll() is None and _answers(url, ca),
            timeout_s=30,
            what=f"the gateway at {url} answering (log {log})",
        )
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
