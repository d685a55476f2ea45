"""Settings more than one kind of process reads: TLS and tokens, etcd, metrics, traces,
logs, under-store calls, and the fields every process declares the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reservoir.common.blocks.data_protection import Level
from reservoir.common.errors import InvalidArgument

from .loading import MiB, env, load, read_secret_file


@dataclass(frozen=True)
class SecuritySettings:
    # CA bundle this process trusts for the servers it dials (and, with client_auth, for
    # the clients that dial it).
    tls_ca: str = field(default="", metadata=env("RESERVOIR_TLS_CA"))
    # This process's certificate and key: a server's identity, and a client's for mTLS.
    tls_cert: str = field(default="", metadata=env("RESERVOIR_TLS_CERT"))
    tls_key: str = field(default="", metadata=env("RESERVOIR_TLS_KEY"))
    # Servers: require a client certificate signed by tls_ca (mutual TLS).
    tls_client_auth: bool = field(default=False, metadata=env("RESERVOIR_TLS_CLIENT_AUTH"))
    # The name checked in server certificates when it is not the dialled host.
    tls_server_name: str = field(default="", metadata=env("RESERVOIR_TLS_SERVER_NAME"))
    # The token this process presents (the file wins over the variable).
    token: str = field(default="", metadata=env("RESERVOIR_TOKEN"), repr=False)
    token_file: str = field(default="", metadata=env("RESERVOIR_TOKEN_FILE"))
    # Servers: hashes and roles of the tokens they accept; empty = no authentication.
    auth_tokens_file: str = field(default="", metadata=env("RESERVOIR_AUTH_TOKENS_FILE"))
    # Workers, with TLS: how the data port protects block bytes (privacy: TLS; integrity:
    # clear and sealed; authentication: clear; blocks/data_protection.py).
    data_protection: str = field(default="privacy", metadata=env("RESERVOIR_DATA_PROTECTION"))

    def __post_init__(self) -> None:
        Level.parse(self.data_protection)

    @classmethod
    def from_env(cls, **overrides: Any) -> SecuritySettings:
        return load(cls, **overrides)

    @property
    def tls(self) -> bool:
        return bool(self.tls_ca or self.tls_cert)

    @property
    def data_level(self) -> Level | None:
        """A worker's data port protection: None without TLS (a cluster that is not
        secure protects nothing)."""
        return Level.parse(self.data_protection) if self.tls else None

    def presented_token(self) -> str:
        if self.token_file:
            return read_secret_file(self.token_file, "token file")
        return self.token.strip()


@dataclass(frozen=True)
class EtcdSettings:
    """How this process reaches etcd securely. TLS is on when a CA or a client certificate
    is set (the metadata URL stays `etcd://host:port`); with neither, a plaintext channel."""

    # CA bundle that signed etcd's serving certificate.
    ca: str = field(default="", metadata=env("RESERVOIR_ETCD_CA"))
    # This process's client certificate and key, for etcd's --client-cert-auth.
    cert: str = field(default="", metadata=env("RESERVOIR_ETCD_CERT"))
    key: str = field(default="", metadata=env("RESERVOIR_ETCD_KEY"))
    # The name checked in etcd's certificate when it is not the dialled host.
    server_name: str = field(default="", metadata=env("RESERVOIR_ETCD_SERVER_NAME"))
    # etcd's own authentication (etcdctl auth enable); the password is read from a file
    # when the store is opened and never kept in settings or logged.
    user: str = field(default="", metadata=env("RESERVOIR_ETCD_USER"))
    password_file: str = field(default="", metadata=env("RESERVOIR_ETCD_PASSWORD_FILE"))

    @classmethod
    def from_env(cls, **overrides: Any) -> EtcdSettings:
        return load(cls, **overrides)

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise InvalidArgument("RESERVOIR_ETCD_CERT and RESERVOIR_ETCD_KEY go together")
        if bool(self.user) != bool(self.password_file):
            raise InvalidArgument(
                "RESERVOIR_ETCD_USER and RESERVOIR_ETCD_PASSWORD_FILE go together"
            )
        if self.user and not self.tls:
            raise InvalidArgument(
                "an etcd password is never sent in clear: RESERVOIR_ETCD_USER needs TLS "
                "(RESERVOIR_ETCD_CA)"
            )

    @property
    def tls(self) -> bool:
        return bool(self.ca or self.cert)

    def password(self) -> str:
        return read_secret_file(self.password_file, "etcd password file")


@dataclass(frozen=True)
class MetricsSettings:
    """Where a server serves its Prometheus metrics (GET /metrics, plain HTTP)."""

    # host:port; port 0 lets the server choose (logged as `metrics_serving`); empty: off.
    listen: str = field(default="", metadata=env("RESERVOIR_METRICS_LISTEN"))
    # A scraper's connection that has not sent its whole request within this is closed.
    request_timeout_s: float = field(default=10.0, metadata=env("RESERVOIR_METRICS_TIMEOUT"))

    @classmethod
    def from_env(cls, **overrides: Any) -> MetricsSettings:
        return load(cls, **overrides)


# The OpenTelemetry protocols a server exports traces with (OTEL_EXPORTER_OTLP_PROTOCOL).
OTLP_PROTOCOLS = ("http/protobuf", "grpc")


@dataclass(frozen=True)
class TraceExportSettings:
    """OpenTelemetry's standard variables: with an endpoint set, servers export their spans
    over OTLP (the exporter reads the rest of the OTEL_* variables itself); without one,
    no span is recorded at all."""

    endpoint: str = field(default="", metadata=env("OTEL_EXPORTER_OTLP_ENDPOINT"))
    traces_endpoint: str = field(default="", metadata=env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    protocol: str = field(default="http/protobuf", metadata=env("OTEL_EXPORTER_OTLP_PROTOCOL"))
    traces_protocol: str = field(default="", metadata=env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))

    @classmethod
    def from_env(cls, **overrides: Any) -> TraceExportSettings:
        return load(cls, **overrides)

    def __post_init__(self) -> None:
        if self.wire_protocol not in OTLP_PROTOCOLS:
            raise InvalidArgument(
                f"OTLP protocol {self.wire_protocol!r} is not supported "
                f"(OTEL_EXPORTER_OTLP_PROTOCOL: {' or '.join(OTLP_PROTOCOLS)})"
            )

    @property
    def exporting(self) -> bool:
        return bool(self.endpoint or self.traces_endpoint)

    @property
    def wire_protocol(self) -> str:
        return self.traces_protocol or self.protocol


@dataclass(frozen=True)
class LogConfig:
    format: str = field(default="console", metadata=env("RESERVOIR_LOG_FORMAT"))  # console|json
    level: str = field(default="info", metadata=env("RESERVOIR_LOG_LEVEL"))
    # botocore, urllib3…: their debug logs carry request headers (Authorization), so they
    # stay at this level whatever `level` is.
    third_party_level: str = field(
        default="warning", metadata=env("RESERVOIR_LOG_THIRD_PARTY_LEVEL")
    )


# The command line prints warnings and errors only, unless RESERVOIR_LOG_LEVEL says more.
CLI_LOG_LEVEL = "warning"


@dataclass(frozen=True)
class UnderStoreCalls:
    """How a process (master, worker, or a client reading S3 itself) calls the under-store."""

    timeout_s: float = field(default=10.0, metadata=env("RESERVOIR_UFS_TIMEOUT"))
    # Attempts of a request that fails before any byte (botocore's own retries).
    retries: int = field(default=3, metadata=env("RESERVOIR_UFS_RETRIES"))
    # Requests in flight to the under-store at once (and its connection pool).
    concurrency: int = field(default=16, metadata=env("RESERVOIR_UFS_CONCURRENCY"))
    # A ranged GET whose body breaks off (truncated, reset) is read again at most this
    # many times, with jittered exponential backoff from `retry_backoff_s`.
    body_retries: int = field(default=3, metadata=env("RESERVOIR_UFS_BODY_RETRIES"))
    retry_backoff_s: float = field(default=0.05, metadata=env("RESERVOIR_UFS_RETRY_BACKOFF"))
    retry_backoff_max_s: float = field(default=1.0, metadata=env("RESERVOIR_UFS_RETRY_BACKOFF_MAX"))
    # A worker's block GETs from S3 are presigned (obstore.sign); a key's URL is reused
    # for this long, so signing is not per GET.
    presign_ttl_s: float = field(default=60.0, metadata=env("RESERVOIR_UFS_PRESIGN_TTL"))
    # Budgeted mounts (max_requests_per_s ...): a burst of at most this many seconds of a
    # share is admitted at once (at least 2 GETs). Preloads take only from a full bucket,
    # so this is also what foreground reads find when they come in a burst; a window of
    # W seconds may see (1 + burst / W) x the limit when the workers were idle before it.
    budget_burst_s: float = field(default=0.5, metadata=env("RESERVOIR_UFS_BUDGET_BURST"))
    # The most of a worker's share of GETs/s preloads (load jobs) may take, even when no
    # foreground read wants it: what they leave keeps foreground reads from queueing
    # behind them, and their CPU from slowing the worker.
    budget_preload_share: float = field(
        default=0.5, metadata=env("RESERVOIR_UFS_BUDGET_PRELOAD_SHARE")
    )
    # The longest a GET waits for its budget before it fails Unavailable.
    budget_wait_s: float = field(default=60.0, metadata=env("RESERVOIR_UFS_BUDGET_WAIT"))
    # A GET answered 503 SlowDown (or cut off) is asked again through the budget at most
    # this many times; each SlowDown halves the mount's rate here, at most once per
    # `slowdown_hold_s`, and the rate grows back linearly to the share in `recovery_s`.
    slowdown_retries: int = field(default=8, metadata=env("RESERVOIR_UFS_SLOWDOWN_RETRIES"))
    slowdown_hold_s: float = field(default=1.0, metadata=env("RESERVOIR_UFS_SLOWDOWN_HOLD"))
    recovery_s: float = field(default=10.0, metadata=env("RESERVOIR_UFS_BUDGET_RECOVERY"))


def rpc_timeout_field() -> Any:
    """The deadline of a unary gRPC call, declared once for every process that makes them."""
    return field(default=10.0, metadata=env("RESERVOIR_RPC_TIMEOUT"))


def master_probe_timeout_field() -> Any:
    """How long a call waits for the master it tries before asking the other masters who
    leads (common/master_calls.py): what a frozen leader costs a caller with several."""
    return field(default=1.0, metadata=env("RESERVOIR_MASTER_PROBE_TIMEOUT"))


def list_page_size_field() -> Any:
    """Entries per page of a directory listing: what a client asks for, and what the master
    answers a request that names no size with."""
    return field(default=1000, metadata=env("RESERVOIR_LIST_PAGE_SIZE"))


def metadata_page_keys_field() -> Any:
    """Keys per etcd range read, for the master and workers: a prefix of any size is read
    page by page (one etcd answer must stay under 4 MiB; a page of larger values is split
    further on its own)."""
    return field(default=1000, metadata=env("RESERVOIR_METADATA_PAGE_KEYS"))


def default_block_size_field() -> Any:
    """The cluster's block size for a mount that names none: the master gives it to new
    mounts, a worker makes its spare block files that size."""
    return field(default=4 * MiB, metadata=env("RESERVOIR_BLOCK_SIZE"))


def under_store_field() -> Any:
    return field(default_factory=lambda: load(UnderStoreCalls))
