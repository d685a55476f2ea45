"""Typed settings, parsed once at start and passed down.

Every setting can come from the environment (the same names in the local launcher,
docker-compose and the Kubernetes manifests) and be overridden by a command-line flag.
Every timeout is a setting.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import socket
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from reservoir.common.errors import InvalidArgument, PermissionDenied

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1024 * GiB}


def parse_size(text: str | int) -> int:
    """'4MiB', '512k', '1g', '1048576' -> bytes (binary units)."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if not match:
        raise InvalidArgument(f"not a size: {text!r}")
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "").lower()[:1]])


def format_size(n: float) -> str:
    """Bytes for people: 1536 -> '1.5KiB' (the inverse of `parse_size`, rounded)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f}{unit}" if unit != "B" else f"{int(n)}B"
        n /= 1024
    return str(n)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """'500ms', '30s', '5m', '1h', '2' (seconds) -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise InvalidArgument(f"not a duration: {text!r} (e.g. 30s, 5m, 1h)")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def env(name: str) -> Any:
    """Field metadata naming the environment variable a setting is read from."""
    return {"env": name}


def _convert(raw: str, kind: Any, attribute: str, name: str) -> Any:
    """`raw` as the field's type. A field named `*_s` is a duration: `30s`, `5m`, `500ms`
    or plain seconds, whatever its type."""
    try:
        if attribute.endswith("_s") and kind in (int, float):
            seconds = parse_duration(raw)
            return seconds if kind is float else round(seconds)
        if kind is int:
            return parse_size(raw)
        if kind is float:
            return float(raw)
        if kind is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
    except (ValueError, InvalidArgument) as exc:
        raise InvalidArgument(
            f"setting {name}: cannot parse {raw!r} ({_expected(kind, attribute)})"
        ) from exc
    return raw


def _expected(kind: Any, attribute: str) -> str:
    if attribute.endswith("_s"):
        return "a duration: 30s, 5m, 500ms or seconds"
    if kind is int:
        return "a number or a size: 4096, 4MiB, 1g"
    if kind is bool:
        return "true or false"
    return "a number"


T = TypeVar("T")

# Where a setting's value came from (`reservoir config` shows it).
DEFAULT, ENVIRONMENT, GIVEN = "default", "environment", "given"


@dataclass(frozen=True)
class Setting:
    """One effective setting: its variable, the value in use and where it came from."""

    name: str  # the environment variable, e.g. RESERVOIR_RPC_TIMEOUT
    attribute: str  # where it sits in the settings, e.g. ufs.timeout_s
    value: Any
    source: str  # DEFAULT, ENVIRONMENT or GIVEN (an argument, a flag, discovery)
    secret: bool = False


def load(
    cls: type[T],
    environ: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> T:
    """Builds `cls` from defaults (the class's, then `defaults`), then the environment,
    then explicit overrides. Nested settings (`etcd`, `ufs`, ...) read the same
    environment."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = dict(defaults or {})
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        kind = hints[f.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            if overrides.get(f.name) is None:
                values[f.name] = load(kind, environ)
            continue
        name = f.metadata.get("env")
        if name and environ.get(name, "") != "":
            values[f.name] = _convert(environ[name], kind, f.name, name)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return cls(**values)


def explain(
    settings: Any, environ: Mapping[str, str] | None = None, prefix: str = ""
) -> list[Setting]:
    """Every setting of a loaded settings object with where its value came from: the
    environment when it names the variable and the value is what it says, the default
    when the value is the class's, else given (an argument, a flag, discovery)."""
    environ = os.environ if environ is None else environ
    cls = type(settings)
    hints = typing.get_type_hints(cls)
    defaults = cls()
    found: list[Setting] = []
    for f in dataclasses.fields(cls):
        value = getattr(settings, f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            found.extend(explain(value, environ, f"{prefix}{f.name}."))
            continue
        name = f.metadata.get("env")
        if not name:
            continue
        if (
            environ.get(name, "") != ""
            and _convert(environ[name], hints[f.name], f.name, name) == value
        ):
            source = ENVIRONMENT
        elif value == getattr(defaults, f.name):
            source = DEFAULT
        else:
            source = GIVEN
        found.append(Setting(name, prefix + f.name, value, source, secret=not f.repr))
    return found


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


def read_secret_file(path: str, what: str) -> str:
    """A token or password kept in a file (a mounted Secret); the error names the file,
    never its content."""
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise PermissionDenied(f"cannot read {what} {path}: {exc.strerror}") from exc


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

    @classmethod
    def from_env(cls, **overrides: Any) -> SecuritySettings:
        return load(cls, **overrides)

    @property
    def tls(self) -> bool:
        return bool(self.tls_ca or self.tls_cert)

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
class FuseConfig:
    """`reservoir fuse`: the POSIX mount's kernel caching, read-ahead and self-healing."""

    # How long the kernel trusts a name's lookup and a file's attributes without asking
    # again (a file's changes show up after the mount's metadata sync and this), and a miss.
    attr_timeout_s: float = field(default=10.0, metadata=env("RESERVOIR_FUSE_ATTR_TIMEOUT"))
    negative_timeout_s: float = field(default=1.0, metadata=env("RESERVOIR_FUSE_NEGATIVE_TIMEOUT"))
    # The largest read the kernel sends in one request, and the threads serving requests.
    # The serving process keeps the inodes it saw for as long (up to this many).
    inode_cache_entries: int = field(
        default=100_000, metadata=env("RESERVOIR_FUSE_INODE_CACHE_ENTRIES")
    )
    max_read_bytes: int = field(default=1 * MiB, metadata=env("RESERVOIR_FUSE_MAX_READ"))
    threads: int = field(default=16, metadata=env("RESERVOIR_FUSE_THREADS"))
    # A reader going through a file in order gets it in chunks of this size, the next
    # `readahead_chunks` fetched while it reads the current one; all open files together
    # hold at most `readahead_memory_bytes` fetched ahead, on `readahead_threads` threads.
    readahead_chunk_bytes: int = field(
        default=4 * MiB, metadata=env("RESERVOIR_FUSE_READAHEAD_CHUNK")
    )
    readahead_chunks: int = field(default=2, metadata=env("RESERVOIR_FUSE_READAHEAD_DEPTH"))
    readahead_memory_bytes: int = field(
        default=256 * MiB, metadata=env("RESERVOIR_FUSE_READAHEAD_MEMORY")
    )
    readahead_threads: int = field(default=8, metadata=env("RESERVOIR_FUSE_READAHEAD_THREADS"))
    # Self-healing: a serving process that dies is replaced; the first replacement starts
    # at once, the next ones after a backoff doubling from `restart_backoff_s`; more than
    # `max_restarts` within `restart_window_s` and the supervisor gives up.
    restart_backoff_s: float = field(default=0.5, metadata=env("RESERVOIR_FUSE_RESTART_BACKOFF"))
    restart_backoff_max_s: float = field(
        default=30.0, metadata=env("RESERVOIR_FUSE_RESTART_BACKOFF_MAX")
    )
    max_restarts: int = field(default=10, metadata=env("RESERVOIR_FUSE_MAX_RESTARTS"))
    restart_window_s: float = field(default=600.0, metadata=env("RESERVOIR_FUSE_RESTART_WINDOW"))
    # How long a serving process may take to mount, to stop, and `fusermount3` to run.
    mount_timeout_s: float = field(default=20.0, metadata=env("RESERVOIR_FUSE_MOUNT_TIMEOUT"))
    stop_timeout_s: float = field(default=10.0, metadata=env("RESERVOIR_FUSE_STOP_TIMEOUT"))
    # Where supervisors record themselves (one JSON file per mount point) and where a
    # daemonized one logs; empty: $XDG_RUNTIME_DIR/reservoir-fuse or /tmp/reservoir-fuse-UID.
    run_dir: str = field(default="", metadata=env("RESERVOIR_FUSE_RUN_DIR"))

    def __post_init__(self) -> None:
        if self.readahead_chunk_bytes <= 0 or self.readahead_chunks < 0:
            raise InvalidArgument(
                "RESERVOIR_FUSE_READAHEAD_CHUNK must be > 0 and RESERVOIR_FUSE_READAHEAD_DEPTH >= 0"
            )
        if self.threads < 1 or self.readahead_threads < 1 or self.max_restarts < 0:
            raise InvalidArgument(
                "RESERVOIR_FUSE_THREADS and RESERVOIR_FUSE_READAHEAD_THREADS must be >= 1, "
                "RESERVOIR_FUSE_MAX_RESTARTS >= 0"
            )


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


def _rpc_timeout() -> Any:
    """The deadline of a unary gRPC call, declared once for every process that makes them."""
    return field(default=10.0, metadata=env("RESERVOIR_RPC_TIMEOUT"))


def _list_page_size() -> Any:
    """Entries per page of a directory listing: what a client asks for, and what the master
    answers a request that names no size with."""
    return field(default=1000, metadata=env("RESERVOIR_LIST_PAGE_SIZE"))


def _metadata_page_keys() -> Any:
    """Keys per etcd range read, for the master and workers: a prefix of any size is read
    page by page (one etcd answer must stay under 4 MiB; a page of larger values is split
    further on its own)."""
    return field(default=1000, metadata=env("RESERVOIR_METADATA_PAGE_KEYS"))


def _under_store() -> Any:
    return field(default_factory=lambda: load(UnderStoreCalls))


@dataclass(frozen=True)
class MasterConfig:
    listen: str = field(default="127.0.0.1:19998", metadata=env("RESERVOIR_MASTER_LISTEN"))
    metadata_url: str = field(
        default="etcd://127.0.0.1:2379", metadata=env("RESERVOIR_METADATA_URL")
    )
    default_block_size: int = field(default=4 * MiB, metadata=env("RESERVOIR_BLOCK_SIZE"))
    # How long an inode fetched from the under-store is trusted before it is checked again.
    metadata_ttl_s: float = field(default=300.0, metadata=env("RESERVOIR_METADATA_TTL"))
    metadata_timeout_s: float = field(default=5.0, metadata=env("RESERVOIR_METADATA_TIMEOUT"))
    metadata_page_keys: int = _metadata_page_keys()
    # TLS, client certificate and user for etcd (RESERVOIR_ETCD_CA, ...).
    etcd: EtcdSettings = field(default_factory=lambda: load(EtcdSettings))
    ufs: UnderStoreCalls = _under_store()
    location_flush_interval_s: float = field(
        default=0.5, metadata=env("RESERVOIR_LOCATION_FLUSH_INTERVAL")
    )
    worker_refresh_interval_s: float = field(
        default=1.0, metadata=env("RESERVOIR_WORKER_REFRESH_INTERVAL")
    )
    grace_s: float = field(default=3.0, metadata=env("RESERVOIR_SHUTDOWN_GRACE"))
    # Subtrees a metadata load lists at a time (each one listing without a delimiter), and
    # directories it lists at a time where it goes level by level.
    metadata_load_parallelism: int = field(
        default=8, metadata=env("RESERVOIR_METADATA_LOAD_PARALLELISM")
    )
    # The first read of an unknown path lists its directory (once, for every reader that
    # misses there) instead of a HEAD per file; past this many entries the listing stops
    # and the rest of that directory is looked up with a HEAD per file (a first read
    # should not wait for a listing of millions; 1,000 entries per LIST request).
    metadata_list_max_entries: int = field(
        default=10_000, metadata=env("RESERVOIR_METADATA_LIST_MAX_ENTRIES")
    )
    rpc_timeout_s: float = _rpc_timeout()
    # A directory listing is answered a page at a time: entries per page when a request
    # names no size, and the most a request may ask for (beyond it: INVALID_ARGUMENT).
    list_page_size: int = _list_page_size()
    list_max_page_size: int = field(default=10_000, metadata=env("RESERVOIR_LIST_MAX_PAGE_SIZE"))
    # Load jobs: blocks per worker call and calls in flight per worker.
    load_batch_blocks: int = field(default=8, metadata=env("RESERVOIR_LOAD_BATCH_BLOCKS"))
    load_calls_per_worker: int = field(default=2, metadata=env("RESERVOIR_LOAD_CALLS_PER_WORKER"))
    load_timeout_s: float = field(default=300.0, metadata=env("RESERVOIR_LOAD_TIMEOUT"))
    # Files one load job may name (SubmitLoadRequest.files): the list is kept in its record.
    load_max_files: int = field(default=10_000, metadata=env("RESERVOIR_LOAD_MAX_FILES"))
    # `reservoir free`: file ids per call to each worker.
    free_batch_files: int = field(default=1000, metadata=env("RESERVOIR_FREE_BATCH_FILES"))
    # Mount policy (see master/mount_policy.py): URI schemes a mount may use, and, when
    # set, the only under-store endpoints allowed (comma-separated).
    allowed_schemes: str = field(default="s3", metadata=env("RESERVOIR_ALLOWED_SCHEMES"))
    allowed_endpoints: str = field(default="", metadata=env("RESERVOIR_ALLOWED_ENDPOINTS"))
    # Prometheus text at /metrics (RESERVOIR_METRICS_LISTEN, ...).
    metrics: MetricsSettings = field(default_factory=lambda: load(MetricsSettings))
    # Several masters share one etcd; one leads (master/leadership.py). The address the
    # others name to callers when this one leads (default: the listen address, its host
    # replaced by this machine's name when it listens on all interfaces).
    advertise: str = field(default="", metadata=env("RESERVOIR_MASTER_ADVERTISE"))
    # The leader's etcd lease: a leader that dies is replaced within about this long. etcd
    # leases count whole seconds (rounded up).
    lease_ttl_s: float = field(default=3.0, metadata=env("RESERVOIR_MASTER_LEASE_TTL"))
    # A write (checkpoint file) whose writer sends no keep-alive for this long is aborted:
    # its multipart upload is dropped in the store (writers keep alive every third of it).
    write_abort_timeout_s: float = field(
        default=300.0, metadata=env("RESERVOIR_WRITE_ABORT_TIMEOUT")
    )

    def __post_init__(self) -> None:
        if not 1 <= self.list_page_size <= self.list_max_page_size:
            raise InvalidArgument(
                "RESERVOIR_LIST_PAGE_SIZE must be >= 1 and at most RESERVOIR_LIST_MAX_PAGE_SIZE"
            )


@dataclass(frozen=True)
class WorkerConfig:
    listen: str = field(default="127.0.0.1:29998", metadata=env("RESERVOIR_WORKER_LISTEN"))
    # The address clients dial; defaults to the listen address (its host replaced by this
    # machine's name when it listens on all interfaces).
    advertise: str = field(default="", metadata=env("RESERVOIR_WORKER_ADVERTISE"))
    # The data port (worker/data_port.py): block bytes over TCP, read by clients in their
    # own thread; TLS with this worker's certificate (and the tokens gRPC checks) when the
    # worker serves TLS. Off: blocks go over gRPC only.
    data_port: bool = field(default=True, metadata=env("RESERVOIR_WORKER_DATA_PORT"))
    # host:port it listens on; empty: the host of `listen`, any free port. Clients dial
    # the advertised host with this port.
    data_listen: str = field(default="", metadata=env("RESERVOIR_WORKER_DATA_LISTEN"))
    data_idle_timeout_s: float = field(
        default=300.0, metadata=env("RESERVOIR_WORKER_DATA_IDLE_TIMEOUT")
    )
    # A reader that takes no bytes for this long is disconnected.
    data_write_timeout_s: float = field(
        default=60.0, metadata=env("RESERVOIR_WORKER_DATA_WRITE_TIMEOUT")
    )
    data_max_connections: int = field(
        default=1024, metadata=env("RESERVOIR_WORKER_DATA_MAX_CONNECTIONS")
    )
    # Requests of one connection read ahead of the response being sent (their blocks
    # looked up or fetched meanwhile).
    data_pipeline: int = field(default=16, metadata=env("RESERVOIR_WORKER_DATA_PIPELINE"))
    # At start, before joining, how long a worker waits for its mounts' under-store clients
    # to be built (~0.3 s of CPU each), so its first misses do not wait for them.
    store_open_wait_s: float = field(default=5.0, metadata=env("RESERVOIR_WORKER_STORE_OPEN_WAIT"))
    worker_id: str = field(default="", metadata=env("RESERVOIR_WORKER_ID"))
    host: str = field(default_factory=socket.gethostname, metadata=env("RESERVOIR_HOST"))
    zone: str = field(default="", metadata=env("RESERVOIR_ZONE"))
    capacity_bytes: int = field(default=1 * GiB, metadata=env("RESERVOIR_WORKER_CAPACITY"))
    # Keep blocks as files in this tmpfs directory (e.g. /dev/shm/reservoir) so clients on
    # the same host can read them directly; empty keeps them in the process's memory.
    shm_dir: str = field(default="", metadata=env("RESERVOIR_WORKER_SHM_DIR"))
    # Which blocks each tier keeps (worker/eviction.py): `tinylfu` (scan-resistant, keeps a
    # fixed share of a data set read in shuffled epochs) or `lru`.
    eviction: str = field(default="tinylfu", metadata=env("RESERVOIR_WORKER_EVICTION"))
    # The disk tier (worker/disk_tier.py): comma-separated directories, one per device,
    # below the memory tier. Blocks are kept there across restarts.
    disk_dirs: str = field(default="", metadata=env("RESERVOIR_WORKER_DISK_DIRS"))
    # Bytes of blocks each disk directory may hold (per directory, not in total: each is
    # usually a device of its own). Required with disk_dirs.
    disk_capacity_bytes: int = field(default=0, metadata=env("RESERVOIR_WORKER_DISK_CAPACITY"))
    # Background eviction starts when a directory holds more than `high` of its capacity
    # and frees blocks down to `low`; the room between `high` and the capacity takes new
    # blocks meanwhile, so a read never waits for eviction.
    disk_high_watermark: float = field(
        default=0.95, metadata=env("RESERVOIR_WORKER_DISK_HIGH_WATERMARK")
    )
    disk_low_watermark: float = field(
        default=0.85, metadata=env("RESERVOIR_WORKER_DISK_LOW_WATERMARK")
    )
    # Threads for disk reads, writes and unlinks (the event loop never touches a disk).
    disk_io_threads: int = field(default=4, metadata=env("RESERVOIR_WORKER_DISK_IO_THREADS"))
    # Block files checked against their checksum at once when a worker starts.
    disk_scan_parallelism: int = field(
        default=4, metadata=env("RESERVOIR_WORKER_DISK_SCAN_PARALLELISM")
    )
    # Bytes of blocks waiting to be written to disk; past it a block is not written (it
    # stays in memory, and is offered to the disk again when evicted from there).
    disk_write_queue_bytes: int = field(
        default=64 * MiB, metadata=env("RESERVOIR_WORKER_DISK_WRITE_QUEUE")
    )
    # fsync each block file before it is renamed into place. Off by default: this is a
    # cache, a process crash (SIGKILL) loses nothing written, and after a power loss a
    # torn file fails its checksum at start and is dropped (then fetched again).
    disk_fsync: bool = field(default=False, metadata=env("RESERVOIR_WORKER_DISK_FSYNC"))
    master: str = field(default="127.0.0.1:19998", metadata=env("RESERVOIR_MASTER"))
    metadata_url: str = field(
        default="etcd://127.0.0.1:2379", metadata=env("RESERVOIR_METADATA_URL")
    )
    metadata_timeout_s: float = field(default=5.0, metadata=env("RESERVOIR_METADATA_TIMEOUT"))
    metadata_page_keys: int = _metadata_page_keys()
    # TLS, client certificate and user for etcd (RESERVOIR_ETCD_CA, ...).
    etcd: EtcdSettings = field(default_factory=lambda: load(EtcdSettings))
    lease_ttl_s: int = field(default=10, metadata=env("RESERVOIR_WORKER_LEASE_TTL"))
    report_interval_s: float = field(default=0.2, metadata=env("RESERVOIR_REPORT_INTERVAL"))
    # A whole-content report now and then repairs what a master lost (e.g. killed between
    # receiving a report and writing it to etcd).
    full_report_interval_s: float = field(
        default=60.0, metadata=env("RESERVOIR_FULL_REPORT_INTERVAL")
    )
    # An idle worker still calls the master this often (an empty report), so it sees a
    # new master epoch — and sends its whole content — within this time.
    master_check_interval_s: float = field(
        default=1.0, metadata=env("RESERVOIR_MASTER_CHECK_INTERVAL")
    )
    rpc_timeout_s: float = _rpc_timeout()
    ufs: UnderStoreCalls = _under_store()
    chunk_size: int = field(default=1 * MiB, metadata=env("RESERVOIR_CHUNK_SIZE"))
    # The largest range ReadSmall answers in one message (above it, clients stream).
    small_read_max_bytes: int = field(
        default=4 * MiB, metadata=env("RESERVOIR_WORKER_SMALL_READ_MAX")
    )
    # The worker follows the mount table by watching etcd; a broken watch is set up again
    # after a pause that doubles from `mount_watch_backoff_s` up to its max.
    mount_watch_backoff_s: float = field(default=0.5, metadata=env("RESERVOIR_MOUNT_WATCH_BACKOFF"))
    mount_watch_backoff_max_s: float = field(
        default=10.0, metadata=env("RESERVOIR_MOUNT_WATCH_BACKOFF_MAX")
    )
    # A fetch that fails at the under-store asks the master whether its mount changed (a
    # remount not yet seen), at most once per this interval per mount.
    mount_recheck_interval_s: float = field(
        default=1.0, metadata=env("RESERVOIR_MOUNT_RECHECK_INTERVAL")
    )
    # How often blocks whose TTL ran out are dropped (a read never gets one, whenever
    # this runs: it checks the TTL itself).
    ttl_sweep_interval_s: float = field(
        default=1.0, metadata=env("RESERVOIR_WORKER_TTL_SWEEP_INTERVAL")
    )
    grace_s: float = field(default=3.0, metadata=env("RESERVOIR_SHUTDOWN_GRACE"))
    # glibc thresholds that keep the worker's footprint near its capacity (measured: see
    # common/malloc_tuning.py).
    malloc_mmap_threshold: int = field(
        default=256 * KiB, metadata=env("RESERVOIR_WORKER_MMAP_THRESHOLD")
    )
    malloc_trim_threshold: int = field(
        default=16 * MiB, metadata=env("RESERVOIR_WORKER_TRIM_THRESHOLD")
    )
    # The same with RESERVOIR_WORKER_SHM_DIR: blocks then live in files, and the heap holds
    # only blocks in flight (fetched, then written out and sent), which higher thresholds
    # let it reuse instead of faulting in fresh pages for each (measured: a cold read of
    # 8 x 32 MiB cost the workers 0.71 s of CPU with the thresholds above, 0.36 s with these).
    malloc_shm_mmap_threshold: int = field(
        default=64 * MiB, metadata=env("RESERVOIR_WORKER_SHM_MMAP_THRESHOLD")
    )
    malloc_shm_trim_threshold: int = field(
        default=256 * MiB, metadata=env("RESERVOIR_WORKER_SHM_TRIM_THRESHOLD")
    )
    # Prometheus text at /metrics (RESERVOIR_METRICS_LISTEN, ...).
    metrics: MetricsSettings = field(default_factory=lambda: load(MetricsSettings))

    def __post_init__(self) -> None:
        if self.disk_dirs and self.disk_capacity_bytes <= 0:
            raise InvalidArgument(
                "RESERVOIR_WORKER_DISK_CAPACITY (bytes per directory) must be set with "
                "RESERVOIR_WORKER_DISK_DIRS"
            )
        if not 0 < self.disk_low_watermark <= self.disk_high_watermark <= 1:
            raise InvalidArgument(
                "disk watermarks need 0 < RESERVOIR_WORKER_DISK_LOW_WATERMARK <= "
                "RESERVOIR_WORKER_DISK_HIGH_WATERMARK <= 1"
            )

    @property
    def disk_directories(self) -> list[str]:
        return [d.strip() for d in self.disk_dirs.split(",") if d.strip()]


@dataclass(frozen=True)
class ClientConfig:
    master: str = field(default="127.0.0.1:19998", metadata=env("RESERVOIR_MASTER"))
    rpc_timeout_s: float = _rpc_timeout()
    read_timeout_s: float = field(default=60.0, metadata=env("RESERVOIR_READ_TIMEOUT"))
    # Deadline of streams that follow a long operation (metadata load, watching a job).
    job_timeout_s: float = field(default=6 * 3600.0, metadata=env("RESERVOIR_JOB_TIMEOUT"))
    file_info_ttl_s: float = field(default=30.0, metadata=env("RESERVOIR_FILE_INFO_TTL"))
    # The first stat that misses in a directory fetches the directory's listing (up to this
    # many entries; 0 = never) instead of that one file's info.
    list_on_miss_max_entries: int = field(
        default=10_000, metadata=env("RESERVOIR_LIST_ON_MISS_MAX_ENTRIES")
    )
    # Entries per master call when listing a directory (`ls`, fsspec, FUSE): what a client
    # holds of a listing at a time, however big the directory.
    list_page_size: int = _list_page_size()
    workers_ttl_s: float = field(default=5.0, metadata=env("RESERVOIR_WORKERS_TTL"))
    # A worker that failed a read (any route) is asked last for this long.
    worker_penalty_s: float = field(default=2.0, metadata=env("RESERVOIR_WORKER_PENALTY"))
    # A block no worker is known to hold is asked of at most this many of its homes, in
    # placement order, before the client reads it from the under-store itself.
    failover_workers: int = field(default=3, metadata=env("RESERVOIR_FAILOVER_WORKERS"))
    # When no worker can serve a block, read it from the under-store directly.
    ufs_fallback: bool = field(default=True, metadata=env("RESERVOIR_UFS_FALLBACK"))
    ufs: UnderStoreCalls = _under_store()
    host: str = field(default_factory=socket.gethostname, metadata=env("RESERVOIR_HOST"))
    zone: str = field(default="", metadata=env("RESERVOIR_ZONE"))
    # Files up to this size are read in batches of `batch_files` per worker call.
    small_file_bytes: int = field(default=1 * MiB, metadata=env("RESERVOIR_SMALL_FILE_BYTES"))
    batch_files: int = field(default=64, metadata=env("RESERVOIR_BATCH_FILES"))
    parallelism: int = field(default=8, metadata=env("RESERVOIR_CLIENT_PARALLELISM"))
    # Read blocks held by a worker on this host straight from its shared-memory files.
    short_circuit: bool = field(default=True, metadata=env("RESERVOIR_SHORT_CIRCUIT"))
    # Read blocks over workers' data ports (in the caller's thread; TLS with this client's
    # CA and token when it speaks TLS) where they have one; off: gRPC only.
    data_port: bool = field(default=True, metadata=env("RESERVOIR_DATA_PORT"))
    # Idle data-port connections kept per worker for the next read (each reading thread
    # takes one while it reads).
    data_port_idle_connections: int = field(
        default=32, metadata=env("RESERVOIR_DATA_PORT_IDLE_CONNECTIONS")
    )
    # Requests a reader of many blocks sends to one worker's data port ahead of the
    # response it is reading (so it waits for one round trip, not one per block).
    data_port_pipeline: int = field(default=8, metadata=env("RESERVOIR_DATA_PORT_PIPELINE"))
    # Check every received block against its CRC32C. Off only to measure what it costs.
    verify_checksums: bool = field(default=True, metadata=env("RESERVOIR_VERIFY_CHECKSUMS"))
    # Raise glibc's mmap/trim thresholds in this process (see common/malloc_tuning.py).
    tune_malloc: bool = field(default=True, metadata=env("RESERVOIR_TUNE_MALLOC"))
    # TLS and the token this client presents (RESERVOIR_TLS_CA, RESERVOIR_TOKEN_FILE, ...).
    security: SecuritySettings = field(default_factory=lambda: load(SecuritySettings))
    # Writes (client/writer.py): a file goes to the store in parts of this size (rounded
    # up to whole blocks; at least S3's 5 MiB), this many in flight at once, each part
    # tried this many more times when the store fails it.
    write_part_size: int = field(default=16 * MiB, metadata=env("RESERVOIR_WRITE_PART_SIZE"))
    write_concurrency: int = field(default=8, metadata=env("RESERVOIR_WRITE_CONCURRENCY"))
    write_part_retries: int = field(default=3, metadata=env("RESERVOIR_WRITE_PART_RETRIES"))
    # How long the workers may take, at close, to keep a written file's staged blocks
    # (renamed in their tiers, copied where a tier cannot rename) and report them.
    write_commit_timeout_s: float = field(
        default=300.0, metadata=env("RESERVOIR_WRITE_COMMIT_TIMEOUT")
    )

    def __post_init__(self) -> None:
        if self.list_page_size < 1:
            raise InvalidArgument("RESERVOIR_LIST_PAGE_SIZE must be >= 1")
        if self.write_part_size < 5 * MiB:
            raise InvalidArgument("RESERVOIR_WRITE_PART_SIZE must be at least 5MiB (S3's floor)")
        if self.write_concurrency < 1 or self.write_part_retries < 0:
            raise InvalidArgument(
                "RESERVOIR_WRITE_CONCURRENCY must be >= 1, RESERVOIR_WRITE_PART_RETRIES >= 0"
            )


@dataclass(frozen=True)
class GatewayConfig:
    """`reservoir gateway`: the S3 API in front of the cache (services/client/reservoir/gateway)."""

    # host:port it serves on; port 0 lets it choose (it logs `gateway_serving`).
    listen: str = field(default="127.0.0.1:19900", metadata=env("RESERVOIR_GATEWAY_LISTEN"))
    # Lines `ACCESS_KEY SECRET ROLE` (role reader or writer): with a file, every request
    # must carry an AWS Signature V4 of one of these keys; without one, any signature (or
    # none) is accepted, as on a cluster without authentication.
    keys_file: str = field(default="", metadata=env("RESERVOIR_GATEWAY_KEYS_FILE"))
    # HTTPS: this certificate and key (empty: the process's RESERVOIR_TLS_CERT and
    # RESERVOIR_TLS_KEY, so a secure cluster's gateway serves HTTPS with the servers' own).
    tls_cert: str = field(default="", metadata=env("RESERVOIR_GATEWAY_TLS_CERT"))
    tls_key: str = field(default="", metadata=env("RESERVOIR_GATEWAY_TLS_KEY"))
    # What GetBucketLocation answers and signatures are scoped to (any region is accepted
    # in a signature's scope; S3 clients sign with the one they are configured with).
    region: str = field(default="us-east-1", metadata=env("RESERVOIR_GATEWAY_REGION"))
    # Virtual-host style: a Host of `BUCKET.<domain>` names the bucket (empty: path style only).
    virtual_host_domain: str = field(default="", metadata=env("RESERVOIR_GATEWAY_DOMAIN"))
    # A GetObject body is read from the cache this many bytes at a time, `read_ahead`
    # pieces ahead of the one being sent: what one response holds in memory is bounded.
    read_piece_bytes: int = field(default=8 * MiB, metadata=env("RESERVOIR_GATEWAY_READ_PIECE"))
    read_ahead: int = field(default=2, metadata=env("RESERVOIR_GATEWAY_READ_AHEAD"))
    # Pieces not in a same-host worker's block file are read from workers' data ports on
    # this many threads (a data port fetches a miss; the thread waits out the fetch, so
    # about as many as the responses in flight). 0: by the client's asyncio path (gRPC).
    read_threads: int = field(default=16, metadata=env("RESERVOIR_GATEWAY_READ_THREADS"))
    # Signed requests dated further than this from the gateway's clock are refused
    # (RequestTimeTooSkewed), as S3 does after 15 minutes.
    clock_skew_s: float = field(default=900.0, metadata=env("RESERVOIR_GATEWAY_CLOCK_SKEW"))
    # Multipart uploads: their parts are spooled under this directory (empty: the system's
    # temporary directory) until CompleteMultipartUpload writes them through; at most this
    # many bytes of parts at once (more answers 503, which S3 clients retry), and an upload
    # neither completed nor aborted this long after it began is dropped.
    spool_dir: str = field(default="", metadata=env("RESERVOIR_GATEWAY_SPOOL_DIR"))
    spool_bytes: int = field(default=16 * GiB, metadata=env("RESERVOIR_GATEWAY_SPOOL_BYTES"))
    upload_expiry_s: float = field(
        default=24 * 3600.0, metadata=env("RESERVOIR_GATEWAY_UPLOAD_EXPIRY")
    )
    # A CompleteMultipartUpload or CopyObject still writing sends a space this often (after
    # its 200 and the XML declaration), as S3 does, so clients' read timeouts do not fire.
    progress_interval_s: float = field(
        default=10.0, metadata=env("RESERVOIR_GATEWAY_PROGRESS_INTERVAL")
    )
    client: ClientConfig = field(default_factory=lambda: load(ClientConfig))

    def __post_init__(self) -> None:
        if self.read_piece_bytes < 1 or self.read_ahead < 0:
            raise InvalidArgument(
                "RESERVOIR_GATEWAY_READ_PIECE must be >= 1 and RESERVOIR_GATEWAY_READ_AHEAD >= 0"
            )
        if self.read_threads < 0:
            raise InvalidArgument("RESERVOIR_GATEWAY_READ_THREADS must be >= 0")

    @property
    def certificate(self) -> tuple[str, str]:
        """The certificate and key it serves HTTPS with; empty: plain HTTP."""
        if self.tls_cert:
            return self.tls_cert, self.tls_key
        return self.client.security.tls_cert, self.client.security.tls_key


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
)
