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
