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
