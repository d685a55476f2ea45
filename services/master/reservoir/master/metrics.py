"""The master's Prometheus metrics: mounts, files and directories, load jobs by state,
live workers.

Namespace chunks, jobs and workers live in etcd; `refresh` reads them there before each
scrape (chunks are counted by etcd, none is sent), under the store's deadline. Files and
directories are the leader's own count (namespace_counts.py). When etcd does
not answer, the scrape still succeeds: `reservoir_master_metadata_up` is 0 and those
series are left out rather than shown stale.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from reservoir.common import logs
from reservoir.common.errors import ReservoirError
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import MetadataStore

from .job_records import TERMINAL
from .leadership import LEADER, Leadership
from .service import MasterService

log = logs.get_logger(__name__)

PREFIX = "reservoir_master_"
JOB_STATES = ("pending", "running", *TERMINAL)


@dataclass(frozen=True, slots=True)
class _Stored:
    namespace_chunks: int
    jobs: dict[str, int]
    workers: int
    worker_capacity_bytes: int


class MasterMetrics(Collector):
    def __init__(self, service: MasterService, store: MetadataStore) -> None:
        self._service = service
        self._store = store
        self._stored: _Stored | None = None

    async def refresh(self) -> None:
        try:
            chunks = await self._store.count_prefix(keyspace.NAMESPACE)
            jobs = dict.fromkeys(JOB_STATES, 0)
            for job in await self._service.jobs.all():
                jobs[job.state] = jobs.get(job.state, 0) + 1
            workers = await self._service.workers()
        except ReservoirError as exc:
            self._stored = None
            log.warning("metrics_metadata_unavailable", error=str(exc))
            return
        self._stored = _Stored(chunks, jobs, len(workers), sum(w.capacity_bytes for w in workers))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            PREFIX + "mounts", "Mounts in the mount table.", value=len(self._service.mount_table)
        )
        stored = self._stored
        yield GaugeMetricFamily(
            PREFIX + "metadata_up",
            "1 when the metadata store (etcd) answered this scrape's questions.",
            value=0 if stored is None else 1,
        )
        if stored is None:
            return
        counted = self._service.namespace.counts.totals()
        if counted is not None:  # the leader, once it has counted (see namespace_counts.py)
            files, directories = counted
            yield GaugeMetricFamily(
                PREFIX + "namespace_files",
                "Files in the namespace (the leader's count; a standby has none).",
                value=files,
            )
            yield GaugeMetricFamily(
                PREFIX + "namespace_directories",
                "Directories in the namespace, each mount's own included (the leader's count).",
                value=directories,
            )
        yield GaugeMetricFamily(
            PREFIX + "namespace_chunks",
            "etcd keys holding the namespace (each up to 64 files and directories of one "
            "directory; counting the entries would read them all).",
            value=stored.namespace_chunks,
        )
        jobs = GaugeMetricFamily(PREFIX + "jobs", "Load jobs by state.", labels=["state"])
        for state, n in stored.jobs.items():
            jobs.add_metric([state], n)
        yield jobs
        yield GaugeMetricFamily(
            PREFIX + "workers", "Live workers (their lease runs).", value=stored.workers
        )
        yield GaugeMetricFamily(
            PREFIX + "workers_capacity_bytes",
            "Memory-tier capacity of the live workers, summed.",
            value=stored.worker_capacity_bytes,
        )


class LeadershipMetrics(Collector):
    """This master's role among several, its term, and how often it took over."""

    def __init__(self, leadership: Leadership) -> None:
        self._leadership = leadership

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        leadership = self._leadership
        yield GaugeMetricFamily(
            PREFIX + "leader",
            "1 while this master leads (and serves), 0 while it is a standby.",
            value=1 if leadership.ready else 0,
        )
        role = GaugeMetricFamily(PREFIX + "role", "This master's role.", labels=["role"])
        for name in (LEADER, "standby"):
            role.add_metric([name], 1 if leadership.role == name else 0)
        yield role
        yield GaugeMetricFamily(
            PREFIX + "term", "The term of the leader this master knows.", value=leadership.term
        )
        yield CounterMetricFamily(
            PREFIX + "takeovers",
            "Times this master became the leader.",
            value=leadership.takeovers,
        )
