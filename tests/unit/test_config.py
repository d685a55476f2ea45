import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reservoir.common import config
from reservoir.common.errors import InvalidArgument


@pytest.mark.parametrize(
    ("text", "value"),
    [("4096", 4096), ("4k", 4096), ("4KiB", 4096), ("1MiB", 1 << 20), ("2g", 2 << 30)],
)
def test_sizes_parse_in_binary_units(text: str, value: int) -> None:
    assert config.parse_size(text) == value


def test_environment_then_overrides_win_over_defaults() -> None:
    env = {"RESERVOIR_WORKER_CAPACITY": "2GiB", "RESERVOIR_WORKER_LEASE_TTL": "7"}
    c = config.load(config.WorkerConfig, env, lease_ttl_s=4)
    assert c.capacity_bytes == 2 << 30
    assert c.lease_ttl_s == 4


def test_given_defaults_yield_to_the_environment() -> None:
    cli = {"level": config.CLI_LOG_LEVEL}
    assert config.load(config.LogConfig, {}, defaults=cli).level == "warning"
    env = {"RESERVOIR_LOG_LEVEL": "debug"}
    assert config.load(config.LogConfig, env, defaults=cli).level == "debug"


def test_unparsable_setting_names_the_variable() -> None:
    with pytest.raises(InvalidArgument, match="RESERVOIR_RPC_TIMEOUT"):
        config.load(config.ClientConfig, {"RESERVOIR_RPC_TIMEOUT": "soon"})


def test_etcd_tls_is_on_when_a_ca_or_client_certificate_is_set() -> None:
    assert not config.load(config.EtcdSettings, {}).tls
    env = {"RESERVOIR_ETCD_CA": "/ca.pem"}
    assert config.load(config.EtcdSettings, env).tls
    env = {"RESERVOIR_ETCD_CERT": "/c.pem", "RESERVOIR_ETCD_KEY": "/k.pem"}
    assert config.load(config.EtcdSettings, env).tls


def test_master_and_worker_read_the_etcd_settings_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESERVOIR_ETCD_CA", "/etc/etcd/ca.pem")
    assert config.load(config.MasterConfig).etcd.ca == "/etc/etcd/ca.pem"
    assert config.load(config.WorkerConfig).etcd.ca == "/etc/etcd/ca.pem"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"RESERVOIR_ETCD_CA": "/ca", "RESERVOIR_ETCD_CERT": "/c"}, "RESERVOIR_ETCD_KEY"),
        ({"RESERVOIR_ETCD_CA": "/ca", "RESERVOIR_ETCD_USER": "u"}, "PASSWORD_FILE"),
        ({"RESERVOIR_ETCD_USER": "u", "RESERVOIR_ETCD_PASSWORD_FILE": "/p"}, "never sent in clear"),
    ],
)
def test_incomplete_or_insecure_etcd_settings_are_refused_by_name(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(InvalidArgument, match=named):
        config.load(config.EtcdSettings, env)


def test_an_unreadable_etcd_password_file_is_refused_by_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    settings = config.EtcdSettings(ca="/ca", user="root", password_file=str(missing))
    with pytest.raises(PermissionError, match=str(missing)):
        settings.password()


@pytest.mark.parametrize(
    ("settings", "variable", "attribute"),
    [
        (config.ClientConfig, "RESERVOIR_RPC_TIMEOUT", "rpc_timeout_s"),
        (config.MasterConfig, "RESERVOIR_RPC_TIMEOUT", "rpc_timeout_s"),
        (config.WorkerConfig, "RESERVOIR_RPC_TIMEOUT", "rpc_timeout_s"),
        (config.ClientConfig, "RESERVOIR_JOB_TIMEOUT", "job_timeout_s"),
        (config.FuseConfig, "RESERVOIR_FUSE_ATTR_TIMEOUT", "attr_timeout_s"),
    ],
)
def test_every_duration_setting_takes_units(settings: type, variable: str, attribute: str) -> None:
    assert getattr(config.load(settings, {variable: "30s"}), attribute) == 30.0
    assert getattr(config.load(settings, {variable: "2m"}), attribute) == 120.0
    assert getattr(config.load(settings, {variable: "250ms"}), attribute) == 0.25
    assert getattr(config.load(settings, {variable: "7"}), attribute) == 7.0


def test_a_whole_second_setting_takes_units_and_stays_whole() -> None:
    lease = config.load(config.WorkerConfig, {"RESERVOIR_WORKER_LEASE_TTL": "1m"}).lease_ttl_s
    assert lease == 60 and isinstance(lease, int)


def test_nested_settings_read_the_environment_they_are_given() -> None:
    env = {"RESERVOIR_UFS_TIMEOUT": "1m", "RESERVOIR_ETCD_CA": "/ca.pem"}
    master = config.load(config.MasterConfig, env)
    assert master.ufs.timeout_s == 60.0
    assert master.etcd.ca == "/ca.pem"
    assert config.load(config.ClientConfig, env).ufs.timeout_s == 60.0


def test_settings_every_process_shares_are_declared_once() -> None:
    source = "".join(p.read_text() for p in Path(config.__file__).parent.glob("*.py"))
    declarations = re.findall(r'env\("(RESERVOIR_[A-Z0-9_]+)"\)', source)
    repeated = {name for name in declarations if declarations.count(name) > 1}
    # Where a process listens or whom it dials, its host, zone and region: one name, read
    # by the master, workers and clients each for itself (two of them at most).
    assert repeated <= {
        "RESERVOIR_MASTER",
        "RESERVOIR_HOST",
        "RESERVOIR_ZONE",
        "RESERVOIR_REGION",
        "RESERVOIR_METADATA_URL",
        "RESERVOIR_METADATA_TIMEOUT",
        "RESERVOIR_SHUTDOWN_GRACE",
    }, repeated
    assert all(declarations.count(name) <= 2 for name in repeated)


def test_a_misspelt_variable_is_reported_with_the_name_it_resembles() -> None:
    env = {
        "RESERVOIR_RPC_TIMOUT": "30s",
        "RESERVOIR_RPC_TIMEOUT": "30s",
        "RESERVOIR_NOTHING_LIKE_IT": "1",
        "RESERVOIR_TEST_SECURE": "1",  # the test harness's own
        "HOME": "/root",
    }
    assert config.unknown_names(env) == {
        "RESERVOIR_RPC_TIMOUT": "RESERVOIR_RPC_TIMEOUT",
        "RESERVOIR_NOTHING_LIKE_IT": None,
    }


def test_explain_says_where_each_value_came_from() -> None:
    env = {"RESERVOIR_RPC_TIMEOUT": "30s", "RESERVOIR_TOKEN": "secret-token"}
    settings = config.load(config.ClientConfig, env, master="10.0.0.5:19998")
    sources = {s.name: s for s in config.explain(settings, env)}
    assert sources["RESERVOIR_RPC_TIMEOUT"].source == config.ENVIRONMENT
    assert sources["RESERVOIR_MASTER"].source == config.GIVEN
    assert sources["RESERVOIR_READ_TIMEOUT"].source == config.DEFAULT
    assert sources["RESERVOIR_UFS_TIMEOUT"].attribute == "ufs.timeout_s"
    assert sources["RESERVOIR_TOKEN"].secret


def test_reservoir_config_prints_settings_sources_and_typos_without_secrets(
    tmp_path: Path,
) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "RESERVOIR_STATE_DIR": str(tmp_path),
        "RESERVOIR_RPC_TIMEOUT": "30s",
        "RESERVOIR_RPC_TIMOUT": "5s",
        "RESERVOIR_TOKEN": "do-not-print-me",
    }
    cli = [sys.executable, "-m", "reservoir.cli.main"]
    shown = subprocess.run(
        [*cli, "config", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    rows = {row["name"]: row for row in json.loads(shown.stdout)}
    assert rows["RESERVOIR_RPC_TIMEOUT"]["value"] == 30.0
    assert rows["RESERVOIR_RPC_TIMEOUT"]["source"] == "environment"
    assert rows["RESERVOIR_READ_TIMEOUT"]["source"] == "default"
    assert "did you mean RESERVOIR_RPC_TIMEOUT" in rows["RESERVOIR_RPC_TIMOUT"]["source"]
    assert "do-not-print-me" not in shown.stdout + shown.stderr
    assert "RESERVOIR_RPC_TIMOUT" in shown.stderr  # the warning every command gives
    bad = subprocess.run(
        [*cli, "config"],
        env={**env, "RESERVOIR_RPC_TIMEOUT": "soon"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1
    assert (
        bad.stderr.strip()
        .splitlines()[-1]
        .startswith("reservoir: error: setting RESERVOIR_RPC_TIMEOUT: cannot parse 'soon'")
    )


def test_reservoir_config_gateway_shows_the_master_it_would_use_and_its_metrics(
    tmp_path: Path,
) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "RESERVOIR_STATE_DIR": str(tmp_path),
        "RESERVOIR_METRICS_LISTEN": "127.0.0.1:0",
    }
    shown = subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "--master", "10.1.2.3:19998"]
        + ["config", "gateway", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    rows = {row["name"]: row for row in json.loads(shown.stdout)}
    assert rows["RESERVOIR_MASTER"]["value"] == "10.1.2.3:19998"
    assert rows["RESERVOIR_MASTER"]["source"] == "--master"
    assert rows["RESERVOIR_METRICS_LISTEN"]["value"] == "127.0.0.1:0"
    assert rows["RESERVOIR_GATEWAY_LISTEN"]["source"] == "default"
