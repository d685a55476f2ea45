"""The master's decisions: mounts, membership and block locations, and the parts that
own the rest (namespace reads in `reads`, edits in `edits`, writes, load jobs, cache
rules), wired together here.

All state lives in the metadata store; what the master keeps in memory (mount table,
location table, live workers) is a cache of it, rebuilt at start.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import CollectorRegistry

from reservoir.common import logs
from reservoir.common.config import MasterConfig
from reservoir.common.errors import InvalidArgument, ReservoirError
from reservoir.common.metadata.metadata_store import MetadataStore
from reservoir.common.models import Mount, MountOptions, WorkerRecord
from reservoir.common.rpc import ChannelOpener
from reservoir.common.understore.mounted_stores import MountedStores
from reservoir.common.understore.under_store_metrics import UnderStoreMetrics
from reservoir.common.worker_calls import WorkerCalls, WorkerDeadlines

from .block_moves import BlockMoves
from .budget_leases import BudgetLeases
from .cache_rules import CacheRules
from .dataset_reconciler import DatasetReconciler
from .datasets import DatasetRecord, DatasetTable
from .event_followers import EventFollowers
from .interval_sync import IntervalSync, SyncRecords
from .job_counters import LoadJobCounters
from .job_records import JobRecords
from .jobs import LoadJobs
from .locality import PathLocality, Place
from .locations import BlockLocationTable
from .metadata_sync import NamespaceSync, now_ms
from .mount_changes import MountChanges
from .mount_policy import MountPolicy
from .mount_table import MountTable
from .namespace_edits import NamespaceEdits
from .namespace_reads import NamespaceReads
from .namespace_store import NamespaceStore
from .renamed_blocks import RenamedBlocks
from .worker_membership import WorkerMembership
from .write_sessions import WriteSessions

# Between attempts to count the namespace while etcd does not answer.
_COUNT_RETRY_S = 1.0
_COUNT_RETRY_MAX_S = 30.0

log = logs.get_logger(__name__)


class MasterService:
    def __init__(
        self,
        store: MetadataStore,
        config: MasterConfig,
        opener: ChannelOpener | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        """`registry`: where the master's under-store and load-job instruments go (the one
        /metrics serves); by default one of their own that no one reads."""
        registry = CollectorRegistry() if registry is None else registry
        self._store = store
        self._config = config
        self.mount_table = MountTable(
            store,
            MountPolicy(config.allowed_schemes, config.allowed_endpoints),
            config.default_block_size,
        )
        self._under_stores = MountedStores.from_settings(
            config.ufs, UnderStoreMetrics(registry, "reservoir_master_")
        )
        self.locations = BlockLocationTable(store)
        self.budgets = BudgetLeases(self.mount_table.mounts, config.budget_period_s)
        self.members = WorkerMembership(store, self.locations)
        # Returned with every block report: a worker that sees a new one re-sends its
        # whole content, so a restarted master's table is exact within seconds.
        self.epoch = f"{now_ms()}-{uuid.uuid4().hex[:8]}"
        self._workers = WorkerCalls(
            opener, WorkerDeadlines(rpc_s=config.rpc_timeout_s, load_s=config.load_timeout_s)
        )
        # boto3 blocks: under-store calls run on a pool of their own, sized by a setting
        # (asyncio's default pool is small on small machines).
        self._pool = ThreadPoolExecutor(config.ufs.concurrency, thread_name_prefix="ufs")
        self.namespace = NamespaceStore(store, self.mount_table)
        self._counting: asyncio.Task[None] | None = None
        self.sync = NamespaceSync(
            self.namespace, config, self.mount_table, self._under_stores, self._pool
        )
        self.reads = NamespaceReads(
            config, self.namespace, self.mount_table, self.sync, self.locations
        )
        self.jobs = LoadJobs(
            store,
            config,
            namespace=self.reads,
            membership=self,
            loader=self._workers,
            locations=self.locations,
            counters=LoadJobCounters(registry),
            moves=BlockMoves(
                JobRecords(store),
                config,
                self.reads,
                self.mount_table,
                self.members,
                self._workers,
                self.locations,
            ),
            marks=self.members,
        )
        self.cache_rules = CacheRules(
            store,
            config,
            namespace=self.reads,
            membership=self,
            mounts=self.mount_table,
            workers=self._workers,
            jobs=self.jobs,
            locations=self.locations,
        )
        self.writes = WriteSessions(
            store, config, self.mount_table, self.namespace, self.sync, self.drop_blocks
        )
        # Freshness: the mounts' interval syncs, and their S3 event queues followed.
        self.interval_sync = IntervalSync(
            self.mount_table,
            self.reads.tree_load,
            self.sync.found,
            SyncRecords(store),
            config.sync_mounts_at_once,
        )
        self.mounting = MountChanges(
            self.mount_table, self._under_stores, self.sync, self.namespace, self.interval_sync
        )
        self.event_followers = EventFollowers(
            self.mount_table, self.sync, self.namespace, self.writes.missing_parents, config
        )
        self.datasets = DatasetTable(store)
        self.reconciler = DatasetReconciler(
            self.datasets,
            self.mount_table,
            self,
            self.reads,
            self.jobs,
            self.cache_rules,
            SyncRecords(store),
            config.dataset_status_interval_s,
        )
        self.edits = NamespaceEdits(
            self.writes,
            self.reads.file_info,
            self.drop_blocks,
            RenamedBlocks(self.locations, self._workers, self),
        )

    async def start(self) -> None:
        """Loads the state from etcd and resumes the load jobs: what a master does when it
        starts to lead. Called again after `stand_down`, it starts afresh."""
        # A new epoch: every worker re-sends its whole content to this leader.
        self.epoch = f"{now_ms()}-{uuid.uuid4().hex[:8]}"
        await self.mount_table.load()
        for mount in self.mount_table.mounts():
            self._under_stores.prepare(mount)  # before the first stat needs it
        await self.namespace.migrate_legacy()
        # In the background: a large namespace takes a while, and the leader serves meanwhile.
        self._counting = asyncio.create_task(self._count_namespace())
        await self.locations.load()
        self.members.restart()
        await self.members.forget_marks()  # of workers gone or restarted meanwhile
        await self.refresh_workers()
        await self.jobs.resume()
        self.interval_sync.restart()
        self.writes.start()  # aborts the uploads of writers that died, this master's or not
        log.info("master_state_loaded", mounts=len(self.mount_table))

    async def _count_namespace(self) -> None:
        pause = _COUNT_RETRY_S
        while True:
            try:
                await self.namespace.count()
                return
            except ReservoirError as exc:
                log.warning("namespace_count_failed", error=str(exc), retry_s=pause)
                await asyncio.sleep(pause)
                pause = min(2 * pause, _COUNT_RETRY_MAX_S)

    async def _stop_counting(self) -> None:
        task, self._counting = self._counting, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.namespace.counts.restart()  # a standby's writes are not its own: no totals

    async def metadata_health(self) -> None:
        """Raises what a write to the metadata store would meet now (etcd out of space,
        unreachable); returns when it takes writes."""
        await self._store.health()

    async def stand_down(self) -> None:
        """Stops what only the leader does: load jobs stop with their records as they are,
        for the next leader to resume; the last block reports go to etcd first."""
        await self.reconciler.close()
        await self._stop_counting()
        await self.event_followers.stop()
        await self.interval_sync.stop()
        await self.writes.stop()
        await self.jobs.close()
        try:
            await self.flush_locations()
        except ReservoirError as exc:
            log.warning("final_location_flush_failed", error=str(exc))

    async def close(self) -> None:
        await self.reconciler.close()
        await self._stop_counting()
        await self.event_followers.stop()
        await self.interval_sync.stop()
        await self.writes.stop()
        await self.jobs.close()
        await self._workers.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- mounts -------------------------------------------------------------------------

    async def mount(
        self, path: str, uri: str, options: MountOptions, *, replace: bool = False
    ) -> Mount:
        """Mounts `uri` at `path` (mount_changes.py)."""
        return await self.mounting.mount(path, uri, options, replace=replace)

    async def unmount(self, path: str) -> None:
        await self.mounting.unmount(path)

    def mounts(self) -> list[Mount]:
        return self.mount_table.mounts()

    # ---- declared datasets ---------------------------------------------------------------

    async def apply_dataset(self, document: object) -> DatasetRecord:
        """Stores a Dataset document and reconciles it now (see datasets.py)."""
        record = await self.datasets.apply(document, self.mount_table.mounts())
        self.reconciler.kick(record.spec.name)
        return record

    async def delete_dataset(self, name: str, keep_cache: bool) -> DatasetRecord:
        record = await self.datasets.mark_deleting(name, keep_cache)
        self.reconciler.kick(name)
        return record

    async def locality(self, path: str, dataset: str = "") -> PathLocality:
        """Bytes of `path`, or of the declared dataset `dataset`'s path, per host, zone
        and region."""
        if dataset:
            record = await self.datasets.get(dataset)
            assert record is not None  # get raises NotFound unless missing_ok
            path = record.spec.path
        if not path:
            raise InvalidArgument("locality: a path or a dataset name is needed")
        places = {w.id: Place(w.host or w.id, w.zone, w.region) for w in await self.workers()}
        return await self.reads.locality(path, places)

    # ---- workers and block locations ----------------------------------------------------

    async def drop_blocks(self, file_ids: list[str]) -> None:
        """Evicts these files' blocks from every live worker now (an overwritten, renamed
        or removed version is never served again). A worker that cannot be reached is
        logged and left: a reader it serves meets the changed ETag and asks again."""
        if not file_ids:
            return
        workers = await self.workers()
        results = await asyncio.gather(
            *(self._workers.free_blocks(w, file_ids) for w in workers),
            return_exceptions=True,
        )
        for worker, result in zip(workers, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("drop_blocks_failed", worker=worker.id, error=str(result))

    async def workers(self) -> list[WorkerRecord]:
        return await self.members.workers()

    async def refresh_workers(self) -> None:
        """Follows who is registered: a worker that joined is given its share of what is
        cached (a fill job); the replicas a lost worker held are made again from the
        copies left (a repair job)."""
        changes = await self.members.refresh()
        for worker in changes.joined:
            await self.jobs.fill(worker)
        for worker_id, blocks in changes.lost_replicas.items():
            await self.jobs.repair(worker_id, blocks)

    def report_blocks(
        self,
        worker_id: str,
        full: bool,
        added: Iterable[tuple[str, int]],
        removed: Iterable[tuple[str, int]],
    ) -> str:
        """Applies a worker's report; returns this master's epoch."""
        if not worker_id:
            raise InvalidArgument("worker_id is required")
        blocks = list(added)
        self.locations.apply(worker_id, full, blocks, list(removed))
        if full:
            log.info("full_block_report", worker=worker_id, blocks=len(blocks))
        return self.epoch

    async def flush_locations(self) -> int:
        if self.locations.pending_workers() - set(self.members.leases):
            await self.refresh_workers()  # a worker that joined since the last refresh
        return await self.locations.flush(self.members.leases)
