"""Which RESERVOIR_* variables exist: every settings class's, and the few read elsewhere;
anything else set in the environment is most likely a typo (warned about once)."""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from typing import Any

from .clients import ClientConfig, FuseConfig, GatewayConfig
from .operator import OperatorConfig
from .servers import MasterConfig, WorkerConfig
from .shared import (
    EtcdSettings,
    LogConfig,
    MetricsSettings,
    SecuritySettings,
    TraceExportSettings,
    UnderStoreCalls,
)

# Variables of ours that are not settings of a class here: where the CLI and `Client()`
# find a local cluster; RESERVOIR_TEST_* belong to the test harness.
STATE_DIR_ENV = "RESERVOIR_STATE_DIR"
OTHER_NAMES = frozenset({STATE_DIR_ENV})
_HARNESS_PREFIX = "RESERVOIR_TEST_"


def known_names() -> frozenset[str]:
    """Every RESERVOIR_* variable some process reads."""
    names: set[str] = set(OTHER_NAMES)
    for settings in ALL_SETTINGS:
        names.update(
            f.metadata["env"]
            for f in dataclasses.fields(settings)
            if f.metadata.get("env", "").startswith("RESERVOIR_")
        )
    return frozenset(names)


def unknown_names(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """RESERVOIR_* variables set in `environ` that nothing reads (typos, most likely),
    each with the closest known name, if one is close."""
    environ = os.environ if environ is None else environ
    known = known_names()
    return {
        name: next(iter(difflib.get_close_matches(name, known, n=1, cutoff=0.75)), None)
        for name in sorted(environ)
        if name.startswith("RESERVOIR_")
        and name not in known
        and not name.startswith(_HARNESS_PREFIX)
    }


_warned: set[str] = set()


def warn_unknown_names(log: Any, environ: Mapping[str, str] | None = None) -> None:
    """Logs each unknown RESERVOIR_* variable once per process (a warning: the process
    still starts, as it would without the variable)."""
    for name, closest in unknown_names(environ).items():
        if name in _warned:
            continue
        _warned.add(name)
        log.warning("unknown_setting", name=name, did_you_mean=closest or "-")


# Every settings class; their variables are the names `warn_unknown_names` knows.
ALL_SETTINGS: tuple[type, ...] = (
    SecuritySettings,
    EtcdSettings,
    MetricsSettings,
    TraceExportSettings,
    LogConfig,
    FuseConfig,
    UnderStoreCalls,
    MasterConfig,
    WorkerConfig,
    ClientConfig,
    GatewayConfig,
    OperatorConfig,
)
