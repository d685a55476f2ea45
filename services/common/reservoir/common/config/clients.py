"""Settings of the processes that read through the cluster: the SDK client, the FUSE
mount and the S3 gateway."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from reservoir.common.errors import InvalidArgument

from .loading import GiB, MiB, env, format_size, load
from .shared import (
    MetricsSettings,
    SecuritySettings,
    UnderStoreCalls,
    list_page_size_field,
    master_probe_timeout_field,
    rpc_timeout_field,
    under_store_field,
)

# A part travels to a worker in one gRPC message (at most 64 MiB with its header).
MAX_PART_BYTES = 63 * MiB


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
class ClientConfig:
    master: str = field(default="127.0.0.1:19998", metadata=env("RESERVOIR_MASTER"))
    rpc_timeout_s: float = rpc_timeout_field()
    master_probe_timeout_s: float = master_probe_timeout_field()
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
    list_page_size: int = list_page_size_field()
    workers_ttl_s: float = field(default=5.0, metadata=env("RESERVOIR_WORKERS_TTL"))
    # A worker that failed a read (any route) is asked last for this long.
    worker_penalty_s: float = field(default=2.0, metadata=env("RESERVOIR_WORKER_PENALTY"))
    # Hedged block reads: a worker whose block has not started to arrive within a budget
    # (the p99 of this client's recent first-byte times, at least the floor, at most
    # `read_hedge_after_s`; 0 = never hedge) is left for the next replica or the
    # under-store, so a hung worker costs a read about that long, not `read_timeout_s`.
    read_hedge_floor_s: float = field(default=0.1, metadata=env("RESERVOIR_READ_HEDGE_FLOOR"))
    read_hedge_after_s: float = field(default=1.0, metadata=env("RESERVOIR_READ_HEDGE_AFTER"))
    # The budget of a file this client has not read yet: its blocks may be misses the worker
    # fetches from the under-store first, and hedging those soon would fetch them twice.
    read_hedge_cold_after_s: float = field(
        default=10.0, metadata=env("RESERVOIR_READ_HEDGE_COLD_AFTER")
    )
    # Hedges are bounded: this share of reads, plus a burst, may hedge (a token bucket), so
    # a slow cluster is not asked twice for everything.
    read_hedge_share: float = field(default=0.05, metadata=env("RESERVOIR_READ_HEDGE_SHARE"))
    read_hedge_burst: int = field(default=10, metadata=env("RESERVOIR_READ_HEDGE_BURST"))
    # A block no worker is known to hold is asked of at most this many of its homes, in
    # placement order, before the client reads it from the under-store itself.
    failover_workers: int = field(default=3, metadata=env("RESERVOIR_FAILOVER_WORKERS"))
    # When no worker can serve a block, read it from the under-store directly.
    ufs_fallback: bool = field(default=True, metadata=env("RESERVOIR_UFS_FALLBACK"))
    ufs: UnderStoreCalls = under_store_field()
    host: str = field(default_factory=socket.gethostname, metadata=env("RESERVOIR_HOST"))
    zone: str = field(default="", metadata=env("RESERVOIR_ZONE"))
    region: str = field(default="", metadata=env("RESERVOIR_REGION"))
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
    # The bytes of parts a client's writes (all of them together) hold until the store
    # has them, kept to send a part again if its worker dies (client/write_buffer.py):
    # a writer that would exceed it waits. At least one part; a part rounded up past it
    # (a mount's blocks larger than the buffer) goes alone.
    write_buffer_bytes: int = field(default=256 * MiB, metadata=env("RESERVOIR_WRITE_BUFFER"))
    # A part goes to a worker, which uploads it to the store before it answers: how long
    # that may take before the part goes to the next worker.
    write_part_timeout_s: float = field(default=120.0, metadata=env("RESERVOIR_WRITE_PART_TIMEOUT"))
    # How long the workers may take, at close, to keep a written file's staged blocks
    # (renamed in their tiers, copied where a tier cannot rename) and report them.
    write_commit_timeout_s: float = field(
        default=300.0, metadata=env("RESERVOIR_WRITE_COMMIT_TIMEOUT")
    )
    # SIGTERM aborts the files being written (client/sigterm_aborts.py) as Ctrl-C does,
    # rather than leaving their uploads to the master's timeout; the abort waits at most
    # this long for the master before the process ends.
    write_abort_on_sigterm: bool = field(
        default=True, metadata=env("RESERVOIR_WRITE_ABORT_ON_SIGTERM")
    )
    write_sigterm_abort_timeout_s: float = field(
        default=3.0, metadata=env("RESERVOIR_WRITE_SIGTERM_ABORT_TIMEOUT")
    )

    def __post_init__(self) -> None:
        if self.list_page_size < 1:
            raise InvalidArgument("RESERVOIR_LIST_PAGE_SIZE must be >= 1")
        if not 5 * MiB <= self.write_part_size <= MAX_PART_BYTES:
            raise InvalidArgument(
                "RESERVOIR_WRITE_PART_SIZE must be at least 5MiB (S3's floor) and at most "
                "63MiB (a part travels to a worker in one message)"
            )
        if min(self.read_hedge_floor_s, self.read_hedge_after_s, self.read_hedge_cold_after_s) < 0:
            raise InvalidArgument(
                "RESERVOIR_READ_HEDGE_FLOOR, RESERVOIR_READ_HEDGE_AFTER and "
                "RESERVOIR_READ_HEDGE_COLD_AFTER must be >= 0"
            )
        if not 0 <= self.read_hedge_share <= 1 or self.read_hedge_burst < 0:
            raise InvalidArgument(
                "RESERVOIR_READ_HEDGE_SHARE must be within [0, 1], RESERVOIR_READ_HEDGE_BURST >= 0"
            )
        if self.write_buffer_bytes < self.write_part_size:
            raise InvalidArgument(
                f"RESERVOIR_WRITE_BUFFER ({format_size(self.write_buffer_bytes)}) must hold at "
                f"least one part (RESERVOIR_WRITE_PART_SIZE, {format_size(self.write_part_size)})"
            )
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
    # A write's body that sends no byte for this long is answered RequestTimeout, as S3
    # does after ~20 s: a stalled client holds no request (and its write) for ever.
    body_idle_timeout_s: float = field(
        default=20.0, metadata=env("RESERVOIR_GATEWAY_BODY_IDLE_TIMEOUT")
    )
    # A GetObject body the client takes no MiB of for this long is cut (the connection
    # closed): a reader that stopped holds no response and its read-ahead for ever.
    send_timeout_s: float = field(default=120.0, metadata=env("RESERVOIR_GATEWAY_SEND_TIMEOUT"))
    # A connection with no request under way (none yet, a request's head still arriving,
    # or between requests) is closed after this long: one that stalls holds no socket for
    # ever. S3 clients open a new connection when a kept one was closed.
    keepalive_timeout_s: float = field(
        default=75.0, metadata=env("RESERVOIR_GATEWAY_KEEPALIVE_TIMEOUT")
    )
    # Its Prometheus metrics (RESERVOIR_METRICS_LISTEN; empty: none), on a port of their own.
    metrics: MetricsSettings = field(default_factory=lambda: load(MetricsSettings))
    client: ClientConfig = field(default_factory=lambda: load(ClientConfig))

    def __post_init__(self) -> None:
        if min(self.body_idle_timeout_s, self.send_timeout_s, self.keepalive_timeout_s) <= 0:
            raise InvalidArgument(
                "RESERVOIR_GATEWAY_BODY_IDLE_TIMEOUT, _SEND_TIMEOUT and _KEEPALIVE_TIMEOUT "
                "must be > 0"
            )
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


@dataclass(frozen=True)
class SchedulingConfig:
    """`reservoir scheduler-extender` and `reservoir admission-webhook`: where Kubernetes
    asks which nodes hold a pod's datasets (services/client/reservoir/k8s)."""

    extender_listen: str = field(default="0.0.0.0:8890", metadata=env("RESERVOIR_EXTENDER_LISTEN"))
    webhook_listen: str = field(default="0.0.0.0:8443", metadata=env("RESERVOIR_WEBHOOK_LISTEN"))
    # HTTPS for the webhook (the API server calls webhooks over TLS only); empty: HTTP,
    # for tests and for a TLS-terminating proxy in front.
    tls_cert: str = field(default="", metadata=env("RESERVOIR_WEBHOOK_TLS_CERT"))
    tls_key: str = field(default="", metadata=env("RESERVOIR_WEBHOOK_TLS_KEY"))
    # How long one answer may wait for the master's locality: the scheduler (httpTimeout)
    # and the API server (timeoutSeconds) give up after their own limits, so an answer
    # must come before them, with an error or no patch when the master is slow or gone.
    locality_timeout_s: float = field(default=2.0, metadata=env("RESERVOIR_LOCALITY_TIMEOUT"))
    # A pod that asks for `reservoir.io/locality: required` runs only on nodes holding at
    # least this share of its datasets' bytes (the pod's `reservoir.io/locality-fraction`
    # annotation overrides it).
    min_fraction: float = field(default=0.1, metadata=env("RESERVOIR_LOCALITY_MIN_FRACTION"))
    # The webhook's affinity lists at most this many nodes (most bytes first).
    affinity_nodes: int = field(default=8, metadata=env("RESERVOIR_WEBHOOK_AFFINITY_NODES"))
    # Where the node's FUSE mount of the cluster's namespace is (a DaemonSet running
    # `reservoir fuse` there): a pod asking for `reservoir.io/fuse: /data` gets this
    # directory (below it, the annotation's `reservoir.io/fuse-path`) mounted at /data.
    fuse_host_path: str = field(
        default="/mnt/reservoir", metadata=env("RESERVOIR_WEBHOOK_FUSE_HOST_PATH")
    )
    client: ClientConfig = field(default_factory=lambda: load(ClientConfig))

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_fraction <= 1.0:
            raise InvalidArgument("RESERVOIR_LOCALITY_MIN_FRACTION must be within 0..1")
        if self.locality_timeout_s <= 0 or self.affinity_nodes < 1:
            raise InvalidArgument(
                "RESERVOIR_LOCALITY_TIMEOUT must be > 0, RESERVOIR_WEBHOOK_AFFINITY_NODES >= 1"
            )
