"""Where a client finds its cluster when it is not told.

The order, the same for `Client()`, `AsyncClient()`, the CLI and `reservoir://` URLs:
the address given, then `$RESERVOIR_MASTER`, then the local cluster that `reservoir local up`
started (its `cluster.json` in `$RESERVOIR_STATE_DIR`, default `~/.reservoir`), and only
then the default address. A `--secure` local cluster also lends its CA and admin token,
unless TLS or a token is configured already.

This reads `cluster.json` itself rather than through `reservoir.local`, which needs the
`local` extra (certificate tooling) that a plain client install does not have.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.config import ClientConfig, SecuritySettings

MASTER_ENV = "RESERVOIR_MASTER"
STATE_DIR_ENV = cfg.STATE_DIR_ENV

log = logs.get_logger(__name__)


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get(STATE_DIR_ENV) or Path.home() / ".reservoir")


@dataclass(frozen=True)
class LocalClusterAddress:
    """What a client needs of a running local cluster: its master and, when secure, the
    CA and admin token it made."""

    master: str
    security: SecuritySettings

    @classmethod
    def read(cls, state_dir: Path) -> LocalClusterAddress | None:
        """The running cluster of `state_dir`; None when there is none (or it is stopped)."""
        try:
            data = json.loads((Path(state_dir) / "cluster.json").read_text())
            master = str(data["master"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        settings = data.get("settings") or {}
        if not settings.get("secure"):
            return cls(master, SecuritySettings())
        credentials = Path(settings.get("credentials") or Path(state_dir) / "tls")
        return cls(
            master,
            SecuritySettings(
                tls_ca=str(credentials / "ca.pem"),
                token_file=str(credentials / "admin.token"),
            ),
        )


def client_config(
    master: str | None = None,
    *,
    state_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ClientConfig:
    """The client settings from the environment, with the master found as the module
    docstring says."""
    environ = os.environ if environ is None else environ
    cfg.warn_unknown_names(log, environ)
    config = cfg.load(ClientConfig, environ)
    local = LocalClusterAddress.read(state_dir or default_state_dir(environ))
    if master:
        config = dataclasses.replace(config, master=master)
    elif not environ.get(MASTER_ENV) and local is not None:
        config = dataclasses.replace(config, master=local.master)
    return with_local_security(config, local)


def with_local_security(config: ClientConfig, local: LocalClusterAddress | None) -> ClientConfig:
    """`config` with the local cluster's CA and token when it dials that cluster and has
    no TLS or token of its own."""
    own = config.security
    if local is None or local.master != config.master:
        return config
    if own.tls_ca or own.token or own.token_file:
        return config
    return dataclasses.replace(config, security=local.security)
