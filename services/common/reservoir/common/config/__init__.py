"""Typed settings, parsed once at start and passed down.

Every setting can come from the environment (the same names in the local launcher,
docker-compose and the Kubernetes manifests) and be overridden by a command-line flag.
Every timeout is a setting. How a settings class is read is in loading.py; the settings
several processes share in shared.py; the master's and workers' in servers.py; the
client's, the FUSE mount's and the gateway's in clients.py; which variables exist in
names.py.
"""

from .clients import ClientConfig, FuseConfig, GatewayConfig, SchedulingConfig
from .loading import (
    DEFAULT,
    ENVIRONMENT,
    GIVEN,
    GiB,
    KiB,
    MiB,
    Setting,
    env,
    explain,
    format_size,
    load,
    parse_duration,
    parse_size,
    read_secret_file,
)
from .names import (
    ALL_SETTINGS,
    OTHER_NAMES,
    STATE_DIR_ENV,
    known_names,
    unknown_names,
    warn_unknown_names,
)
from .operator import OperatorConfig
from .servers import MasterConfig, WorkerConfig
from .shared import (
    CLI_LOG_LEVEL,
    OTLP_PROTOCOLS,
    EtcdSettings,
    LogConfig,
    MetricsSettings,
    SecuritySettings,
    TraceExportSettings,
    UnderStoreCalls,
)

__all__ = [
    "ALL_SETTINGS",
    "CLI_LOG_LEVEL",
    "DEFAULT",
    "ENVIRONMENT",
    "GIVEN",
    "OTHER_NAMES",
    "OTLP_PROTOCOLS",
    "STATE_DIR_ENV",
    "ClientConfig",
    "EtcdSettings",
    "FuseConfig",
    "GatewayConfig",
    "SchedulingConfig",
    "GiB",
    "KiB",
    "LogConfig",
    "MasterConfig",
    "OperatorConfig",
    "MetricsSettings",
    "MiB",
    "SecuritySettings",
    "Setting",
    "TraceExportSettings",
    "UnderStoreCalls",
    "WorkerConfig",
    "env",
    "explain",
    "format_size",
    "known_names",
    "load",
    "parse_duration",
    "parse_size",
    "read_secret_file",
    "unknown_names",
    "warn_unknown_names",
]
