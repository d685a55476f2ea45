"""How a client finds its master when it is not told: argument, env, local cluster."""

from __future__ import annotations

import json
from pathlib import Path

from reservoir.client.discovery import client_config


def _local_cluster(state_dir: Path, master: str, secure: bool = False) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    settings = {"secure": True, "credentials": str(state_dir / "tls")} if secure else {}
    (state_dir / "cluster.json").write_text(json.dumps({"master": master, "settings": settings}))


def test_an_explicit_master_wins_over_env_and_local_cluster(tmp_path: Path) -> None:
    _local_cluster(tmp_path, "127.0.0.1:3")
    env = {"RESERVOIR_MASTER": "127.0.0.1:2", "RESERVOIR_STATE_DIR": str(tmp_path)}
    assert client_config("127.0.0.1:1", environ=env).master == "127.0.0.1:1"


def test_the_env_master_wins_over_the_local_cluster(tmp_path: Path) -> None:
    _local_cluster(tmp_path, "127.0.0.1:3")
    env = {"RESERVOIR_MASTER": "127.0.0.1:2", "RESERVOIR_STATE_DIR": str(tmp_path)}
    assert client_config(environ=env).master == "127.0.0.1:2"


def test_with_nothing_configured_the_local_cluster_is_used(tmp_path: Path) -> None:
    _local_cluster(tmp_path, "127.0.0.1:3")
    assert client_config(environ={"RESERVOIR_STATE_DIR": str(tmp_path)}).master == "127.0.0.1:3"


def test_a_stopped_or_absent_local_cluster_leaves_the_default_address(tmp_path: Path) -> None:
    (tmp_path / "stopped.json").write_text(json.dumps({"master": "127.0.0.1:3"}))
    config = client_config(environ={"RESERVOIR_STATE_DIR": str(tmp_path)})
    assert config.master == "127.0.0.1:19998"


def test_a_secure_local_cluster_lends_its_ca_and_admin_token(tmp_path: Path) -> None:
    _local_cluster(tmp_path, "127.0.0.1:3", secure=True)
    config = client_config(environ={"RESERVOIR_STATE_DIR": str(tmp_path)})
    assert config.security.tls_ca == str(tmp_path / "tls" / "ca.pem")
    assert config.security.token_file == str(tmp_path / "tls" / "admin.token")


def test_a_configured_token_is_not_replaced_by_the_local_clusters(tmp_path: Path) -> None:
    _local_cluster(tmp_path, "127.0.0.1:3", secure=True)
    env = {"RESERVOIR_STATE_DIR": str(tmp_path), "RESERVOIR_TOKEN_FILE": "/etc/mine.token"}
    assert client_config(environ=env).security.token_file == "/etc/mine.token"


def test_the_local_clusters_credentials_are_not_sent_to_another_master(tmp_path: Path) -> None:
    _local_cluster(tmp_path, "127.0.0.1:3", secure=True)
    config = client_config("10.0.0.9:19998", environ={"RESERVOIR_STATE_DIR": str(tmp_path)})
    assert config.security.tls_ca == ""
    assert config.security.token_file == ""
