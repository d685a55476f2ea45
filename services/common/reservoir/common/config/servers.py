"""The master's and the workers' settings."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from reservoir.common.errors import InvalidArgument

from .loading import GiB, KiB, MiB, env, load
from .shared import (
    EtcdSettings,
    MetricsSettings,
    UnderStoreCalls,
    default_block_size_field,
    list_page_size_field,
    master_probe_timeout_field,
    metadata_page_keys_field,
    rpc_timeout_field,
    under_store_field,
)


@dataclass(frozen=True)
class MasterConfig:
    listen: str = field(default="127.0.0.1:19998", metadata=env("RESERVOIR_MASTER_LISTEN"))
    metadata_url: str = field(
        default="etcd://127.0.0.1:2379", metadata=env("RESERVOIR_METADATA_URL")
    )
    default_block_size: int = default_block_size_field()
    # How long an inode fetched from the under-store is trusted before it is checked again.
    metadata_ttl_s: float = field(default=300.0, metadata=env("RESERVOIR_METADATA_TTL"))
    metadata_timeout_s: float = field(default=5.0, metadata=env("RESERVOIR_METADATA_TIMEOUT"))
    metadata_page_keys: int = metadata_page_keys_field()
    # TLS, client certificate and user for etcd (RESERVOIR_ETCD_CA, ...).
    etcd: EtcdSettings = field(default_factory=lambda: load(EtcdSettings))
    ufs: UnderStoreCalls = under_store_field()
    location_flush_interval_s: float = field(
        default=0.5, metadata=env("RESERVOIR_LOCATION_FLUSH_INTERVAL")
    )
    worker_refresh_interval_s: float = field(
        default=1.0, metadata=env("RESERVOIR_WORKER_REFRESH_INTERVAL")
    )
    grace_s: float = field(default=3.0, metadata=env("RESERVOIR_SHUTDOWN_GRACE"))
    # How often the leader re-splits each budgeted mount's limits among the workers by
    # their recent demand (the lease period: what a lost master costs at most).
    budget_period_s: float = field(default=1.0, metadata=env("RESERVOIR_BUDGET_PERIOD"))
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
    rpc_timeout_s: float = rpc_timeout_field()
    # A directory listing is answered a page at a time: entries per page when a request
    # names no size, and the most a request may ask for (beyond it: INVALID_ARGUMENT).
    list_page_size: int = list_page_size_field()
    list_max_page_size: int = field(default=10_000, metadata=env("RESERVOIR_LIST_MAX_PAGE_SIZE"))
    # Load jobs: blocks per worker call and calls in flight per worker.
    load_batch_blocks: int = field(default=8, metadata=env("RESERVOIR_LOAD_BATCH_BLOCKS"))
    load_calls_per_worker: int = field(default=2, metadata=env("RESERVOIR_LOAD_CALLS_PER_WORKER"))
    load_timeout_s: float = field(default=300.0, metadata=env("RESERVOIR_LOAD_TIMEOUT"))
    # Drains and fills (master/block_moves.py): bytes a second copied between workers over
    # the whole cluster (0: no limit), blocks per PullBlocks call, and calls in flight per
    # receiving worker. A move shares the network with reads: the rate keeps it polite.
    move_bytes_per_s: int = field(default=256 * MiB, metadata=env("RESERVOIR_MOVE_RATE"))
    move_batch_blocks: int = field(default=8, metadata=env("RESERVOIR_MOVE_BATCH_BLOCKS"))
    move_calls_per_worker: int = field(default=2, metadata=env("RESERVOIR_MOVE_CALLS_PER_WORKER"))
    # A worker that joins gets its share of what is cached copied to it (a "fill" job);
    # off, it fills from the under-store as reads miss.
    fill_on_join: bool = field(default=True, metadata=env("RESERVOIR_FILL_ON_JOIN"))
    # Declared datasets (master/dataset_reconciler.py): how often the leader looks at each
    # one, and how often it counts what is cached of it for its status (a namespace walk).
    dataset_reconcile_interval_s: float = field(
        default=1.0, metadata=env("RESERVOIR_DATASET_RECONCILE_INTERVAL")
    )
    dataset_status_interval_s: float = field(
        default=10.0, metadata=env("RESERVOIR_DATASET_STATUS_INTERVAL")
    )
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

    # Freshness (master/interval_sync.py, master/event_queue.py). How often the leader
    # looks for mounts whose `interval:<d>` sync is due, and for mounts whose event queue
    # it should start or stop following.
    sync_tick_s: float = field(default=0.5, metadata=env("RESERVOIR_SYNC_TICK"))
    # Paths of new or changed files a sync keeps in its record (for a preload of what
    # changed); past it the record says it has more.
    sync_found_max: int = field(default=1000, metadata=env("RESERVOIR_SYNC_FOUND_MAX"))
    # Mounts whose interval syncs run at once (each walks its tree with the metadata
    # load's parallelism).
    sync_mounts_at_once: int = field(default=2, metadata=env("RESERVOIR_SYNC_MOUNTS_AT_ONCE"))
    # An SQS long poll waits this long for a message (whole seconds, at most 20): the
    # delay of a quiet queue's stop, not of a change, which returns the poll at once.
    events_wait_s: int = field(default=1, metadata=env("RESERVOIR_EVENTS_WAIT"))
    # Messages per receive (SQS takes 1 to 10).
    events_batch: int = field(default=10, metadata=env("RESERVOIR_EVENTS_BATCH"))
    # A message received is hidden from other receivers this long (whole seconds): if the
    # leader that took it dies before deleting it (a long poll answered to a dead
    # process), the next leader gets it after this, not after the queue's default 30 s.
    # An event applied twice does no harm.
    events_visibility_s: int = field(default=10, metadata=env("RESERVOIR_EVENTS_VISIBILITY"))
    # After a failed receive, the follower waits this long (doubled each time, at most
    # the max, with jitter) before the next: a queue that is gone is not hammered.
    events_backoff_s: float = field(default=0.5, metadata=env("RESERVOIR_EVENTS_BACKOFF"))
    events_backoff_max_s: float = field(default=30.0, metadata=env("RESERVOIR_EVENTS_BACKOFF_MAX"))

    def __post_init__(self) -> None:
        if (
            not 0 <= self.events_wait_s <= 20
            or not 1 <= self.events_batch <= 10
            or self.events_visibility_s < 1
        ):
            raise InvalidArgument(
                "RESERVOIR_EVENTS_WAIT must be 0 to 20 (seconds), RESERVOIR_EVENTS_BATCH 1 to "
                "10 and RESERVOIR_EVENTS_VISIBILITY at least 1 (seconds)"
            )
        if self.sync_tick_s <= 0 or self.sync_found_max < 0 or self.sync_mounts_at_once < 1:
            raise InvalidArgument(
                "RESERVOIR_SYNC_TICK must be > 0, RESERVOIR_SYNC_FOUND_MAX >= 0, "
                "RESERVOIR_SYNC_MOUNTS_AT_ONCE >= 1"
            )
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
    region: str = field(default="", metadata=env("RESERVOIR_REGION"))
    capacity_bytes: int = field(default=1 * GiB, metadata=env("RESERVOIR_WORKER_CAPACITY"))
    # Keep blocks as files in this tmpfs directory (e.g. /dev/shm/reservoir) so clients on
    # the same host can read them directly; empty keeps them in the process's memory.
    shm_dir: str = field(default="", metadata=env("RESERVOIR_WORKER_SHM_DIR"))
    # `mount`: the worker mounts a tmpfs with transparent huge pages at shm_dir for its
    # lifetime (common/tmpfs_mount.py): block files on 2 MiB pages, not 4 KiB ones, for
    # fewer faults in landings and short-circuit reads. Needs CAP_SYS_ADMIN and clients in
    # the worker's mount namespace; `off` uses shm_dir as it is.
    shm_huge_pages: str = field(default="off", metadata=env("RESERVOIR_WORKER_SHM_HUGE_PAGES"))
    # Spare block files the shm tier keeps for the next blocks to land in, their pages
    # already allocated (worker/spare_block_files.py): landings it did not keep, and with
    # shm_preallocate (on), files of the cluster's block size written at start. Memory the worker
    # holds beyond its capacity, at most a sixteenth of the capacity; 0 turns spares off.
    shm_spare_bytes: int = field(default=256 * MiB, metadata=env("RESERVOIR_WORKER_SHM_SPARE"))
    shm_preallocate: bool = field(default=True, metadata=env("RESERVOIR_WORKER_SHM_PREALLOCATE"))
    # The size of the spare files made at start.
    default_block_size: int = default_block_size_field()
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
    metadata_page_keys: int = metadata_page_keys_field()
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
    rpc_timeout_s: float = rpc_timeout_field()
    master_probe_timeout_s: float = master_probe_timeout_field()
    ufs: UnderStoreCalls = under_store_field()
    # Parts of files being written that this worker uploads to the under-store at once
    # (WritePart: writers send each part here once).
    write_threads: int = field(default=8, metadata=env("RESERVOIR_WORKER_WRITE_THREADS"))
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
    # How often a worker re-reads the registry for its share of each mount's quota (its
    # capacity over the cluster's): a worker that joined or left moves the shares.
    share_interval_s: float = field(default=5.0, metadata=env("RESERVOIR_WORKER_SHARE_INTERVAL"))
    # How often a worker publishes when it last served each mount with an idle TTL and
    # reclaims the blocks of mounts no worker served for that long.
    idle_sweep_interval_s: float = field(
        default=5.0, metadata=env("RESERVOIR_WORKER_IDLE_SWEEP_INTERVAL")
    )
    grace_s: float = field(default=3.0, metadata=env("RESERVOIR_SHUTDOWN_GRACE"))
    # On SIGTERM the worker drains itself (its blocks copied to their next homes) for up to
    # this long before it exits, so a node drain or a pod's termination keeps the cache;
    # 0: exit at once. Keep it below Kubernetes' terminationGracePeriodSeconds.
    drain_timeout_s: float = field(default=60.0, metadata=env("RESERVOIR_WORKER_DRAIN_TIMEOUT"))
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
        if self.shm_huge_pages not in ("off", "mount"):
            raise InvalidArgument(
                f"RESERVOIR_WORKER_SHM_HUGE_PAGES is 'off' or 'mount', not {self.shm_huge_pages!r}"
            )
        if self.shm_huge_pages == "mount" and not self.shm_dir:
            raise InvalidArgument(
                "RESERVOIR_WORKER_SHM_HUGE_PAGES=mount needs RESERVOIR_WORKER_SHM_DIR"
            )
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
    def spare_limit_bytes(self) -> int:
        """The shm tier's spare block files at most: the setting, within a sixteenth of
        the capacity (memory held beyond it stays small; a small cache keeps few)."""
        return min(self.shm_spare_bytes, self.capacity_bytes // 16)

    @property
    def disk_directories(self) -> list[str]:
        return [d.strip() for d in self.disk_dirs.split(",") if d.strip()]
