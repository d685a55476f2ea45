"""What `reservoir local up` records about a cluster, and what `local up --resume` makes of
the settings it is given.

A resumed cluster is the cluster that was stopped: a setting left out is the recorded one,
and one given that differs is refused rather than applied. Quietly applying it would give
a different cluster under the old mounts; quietly dropping it (what `--resume` once did with
`--secure`) would serve a secured cluster's data to anyone who asks.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .process import ClusterError

CLEAN = "`reservoir local up` without --resume starts a clean cluster"


@dataclass(frozen=True)
class Setting:
    key: str  # the name in cluster.json's "settings"
    flag: str  # how `reservoir local up` spells it (or the LocalCluster.up argument)
    default: Any

    def spelled(self, value: Any) -> str:
        """The value as the user would have typed it."""
        if isinstance(value, bool):
            return self.flag if value else f"--no-{self.flag.removeprefix('--')}"
        if isinstance(value, dict) and self.flag.startswith("--"):
            given = [f"{self.flag} {k}={v}" for k, v in sorted(value.items())]
            return " ".join(given) or f"no {self.flag}"
        if self.flag.startswith("--"):
            return f"{self.flag} {value if value not in ('', None) else '(none)'}"
        return f"{self.flag}={value!r}"


SETTINGS: tuple[Setting, ...] = (
    Setting("workers", "--workers", 2),
    Setting("masters", "--masters", 1),
    Setting("capacity", "--capacity", "1GiB"),
    Setting("disk_capacity", "--disk-capacity", ""),
    Setting("shm", "--shm", False),
    Setting("secure", "--secure", False),
    # An S3 gateway in front of the cluster (`reservoir gateway`).
    Setting("gateway", "--gateway", False),
    Setting("s3_latency_ms", "--s3-latency-ms", 0.0),
    # How many etcd members (1: a single etcd; 3: a cluster that survives one loss).
    Setting("etcd_members", "--etcd-members", 1),
    Setting("lease_ttl", "lease_ttl", 10),
    # More environment for every server (`local up --env KEY=VALUE`), over what they inherit.
    Setting("env", "--env", {}),
    # More flags for every etcd member (tests: e.g. a small --quota-backend-bytes).
    Setting("etcd_flags", "etcd_flags", []),
    # Where a --secure cluster's CA, certificates and tokens are ("" = <state dir>/tls).
    Setting("credentials", "credentials", ""),
    # The workers and each one's own options (`local add-worker`); see worker_roster.py.
    Setting("roster", "roster", {}),
)


def resolve(given: Mapping[str, Any], recorded: Mapping[str, Any] | None) -> dict[str, Any]:
    """The settings of the cluster to start. `given`: each setting's value as asked for,
    None where it was left out. `recorded`: the stopped cluster's settings when resuming
    (None for a new cluster: what is left out takes its default)."""
    unknown = set(given) - {s.key for s in SETTINGS}
    if unknown:
        raise ValueError(f"unknown cluster settings: {sorted(unknown)}")
    settings: dict[str, Any] = {}
    for setting in SETTINGS:
        value = given.get(setting.key)
        if recorded is None:
            # A copy: a cluster that changes its settings (its env) must not change the
            # default every later cluster of this process starts from.
            settings[setting.key] = copy.deepcopy(setting.default) if value is None else value
            continue
        was = recorded.get(setting.key, setting.default)
        if value is not None and _normal(value) != _normal(was):
            raise ClusterError(_conflict(setting, value, was))
        settings[setting.key] = was
    return settings


def _normal(value: Any) -> Any:
    # JSON gives back 0 for 0.0 and lists for tuples; what was typed is compared as recorded.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return float(value)


def _conflict(setting: Setting, value: Any, was: Any) -> str:
    if setting.key == "secure" and was and not value:
        return (
            "cannot resume with --no-secure: the stopped cluster is --secure (TLS and "
            "tokens), and a resumed cluster keeps its security; leave the flag out, or "
            f"{CLEAN}"
        )
    return (
        f"cannot resume with {setting.spelled(value)}: the stopped cluster was started with "
        f"{setting.spelled(was)}; leave the flag out to resume it as it was, or {CLEAN}"
    )
