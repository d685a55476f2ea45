"""A real cluster on credentials made by `reservoir credentials create`, used by the CLI the
way an operator and a reader would (RESERVOIR_TLS_CA + RESERVOIR_TOKEN_FILE)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reservoir.local.cluster import LocalCluster
from tests.conftest import LEASE_TTL_S, SECURE, new_mount_path, own_cluster_env

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(SECURE, reason="brings its own credentials; runs in the plain pass"),
]


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_a_cluster_runs_on_cli_made_credentials_and_each_token_gets_its_role(
    tmp_path: Path,
) -> None:
    creds = tmp_path / "credentials"
    made = _cli(
        "credentials", "create", str(creds), "--workers", "worker1,worker2",
        "--hosts", "reservoir.test", env=own_cluster_env(),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    cluster = LocalCluster.up(
        tmp_path / "cluster", workers=2, lease_ttl=LEASE_TTL_S, secure=True, credentials=creds
    )
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="creds")
        payload = os.urandom(100_000)
        s3.put_object(Bucket="creds", Key="d/a.bin", Body=payload)
        # A client elsewhere: the master's address, the CA, a name from --hosts to check.
        base = {
            **own_cluster_env(),
            "RESERVOIR_MASTER": cluster.master_address,
            "RESERVOIR_TLS_CA": str(creds / "ca.pem"),
            "RESERVOIR_TLS_SERVER_NAME": "reservoir.test",
        }
        admin = {**base, "RESERVOIR_TOKEN_FILE": str(creds / "admin.token")}
        reader = {**base, "RESERVOIR_TOKEN_FILE": str(creds / "reader.token")}
        root = new_mount_path()
        mount = ("mount", root, "s3://creds/d", "--endpoint-url", cluster.s3_endpoint)
        done = _cli(*mount, env=admin)
        assert done.returncode == 0, done.stderr
        read = subprocess.run(
            [sys.executable, "-m", "reservoir.cli.main", "cat", f"{root}/a.bin"],
            capture_output=True,
            timeout=60,
            env=reader,
        )
        assert read.returncode == 0, read.stderr
        assert read.stdout == payload
        # Both workers registered and report with the tokens the command made for them.
        workers = _cli("--json", "workers", env=reader)
        assert workers.returncode == 0, workers.stderr
        assert '"worker1"' in workers.stdout and '"worker2"' in workers.stdout
        refused = _cli("unmount", root, env=reader)
        assert refused.returncode == 1 and "needs the admin role" in refused.stderr
        anonymous = _cli("ls", root, env={k: v for k, v in base.items()})
        assert anonymous.returncode == 1 and "token" in anonymous.stderr
        health = _cli("health", cluster.master_address, env=base)
        assert health.returncode == 0 and health.stdout.strip() == "SERVING", health.stderr
        for name in ("admin", "reader", "master", "worker1", "worker2"):
            token = (creds / f"{name}.token").read_text().strip()
            for log in (tmp_path / "cluster").glob("*.log"):
                assert token not in log.read_text(errors="replace"), (name, log.name)
    finally:
        cluster.down()
