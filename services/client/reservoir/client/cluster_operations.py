"""What a user asks of the cluster as a whole, each one master call through `ClusterView`:
warm-up (metadata loads, load jobs, the cached report, locality), declared datasets,
drains, and cache rules (pin, TTL, free). A part of `AsyncClient`, kept apart so the
facade's own file holds the read and write paths."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from reservoir.common.config import parse_duration
from reservoir.common.errors import InvalidArgument
from reservoir.common.models import CacheRule
from reservoir.v1 import master_pb2

from .cache_state import CacheReport, FreeResult, PinResult
from .cluster_view import ClusterView
from .datasets import Dataset, document_of
from .load_jobs import LoadJob, MetadataLoadProgress
from .locality import Locality


class ClusterOperations:
    _view: ClusterView  # the AsyncClient's

    # ---- warm-up: metadata load, load jobs, cached report ----------------------------------

    async def load_metadata(
        self, path: str, recursive: bool = True
    ) -> AsyncIterator[MetadataLoadProgress]:
        """Syncs the namespace below `path` (only its own level unless `recursive`) from
        the under-store into etcd now, yielding progress; the last one has `done` set."""
        request = master_pb2.LoadMetadataRequest(path=path, recursive=recursive)
        async for progress in self._view.stream("LoadMetadata", request, f"load metadata {path}"):
            yield MetadataLoadProgress.from_proto(progress)
        self._view.forget_all()

    async def report(self, path: str) -> CacheReport:
        """The files and bytes below `path`, and how much of them is cached."""
        response = await self._view.call(
            "Report", master_pb2.ReportRequest(path=path), f"report {path}"
        )
        return CacheReport.from_proto(path, response)

    async def locality(self, path: str = "", *, dataset: str = "") -> Locality:
        """Bytes of `path` (or of the declared dataset named `dataset`) cached per host,
        zone and region: one call, answered from the master's location table."""
        response = await self._view.call(
            "Locality",
            master_pb2.LocalityRequest(path=path, dataset=dataset),
            f"locality {dataset or path}",
        )
        return Locality.from_proto(response)

    async def submit_load(
        self,
        path: str,
        *,
        replicas: int = 1,
        priority_paths: Sequence[str] = (),
        metadata_only: bool = False,
        files: Sequence[str] = (),
    ) -> LoadJob:
        """Starts a load job that caches every file below `path` on `replicas` workers
        each, the files below `priority_paths` first; `metadata_only` syncs the namespace
        and caches no data; `files` loads only those (each at or below `path`, a relative
        name below it; in that order; at most the master's RESERVOIR_LOAD_MAX_FILES).
        Returns the job as submitted: follow it with `watch_job(job.id)`."""
        request = master_pb2.SubmitLoadRequest(
            path=path,
            replicas=replicas,
            priority_paths=list(priority_paths),
            metadata_only=metadata_only,
            files=list(files),
            # Sent again as is when a master call is retried: one job, however many tries.
            request_id=uuid.uuid4().hex,
        )
        return LoadJob.from_proto(await self._view.call("SubmitLoad", request, f"load {path}"))

    async def job(self, job_id: str) -> LoadJob:
        """A load job as the master has it now. NotFound (a FileNotFoundError) for an unknown id."""
        reply = await self._view.call(
            "GetJob", master_pb2.GetJobRequest(id=job_id), f"job {job_id}"
        )
        return LoadJob.from_proto(reply)

    async def watch_job(self, job_id: str) -> AsyncIterator[LoadJob]:
        """The job each time it changes, until it ends: the last one yielded is finished."""
        request = master_pb2.GetJobRequest(id=job_id)
        async for job in self._view.stream("WatchJob", request, f"watch job {job_id}"):
            yield LoadJob.from_proto(job)

    async def cancel_job(self, job_id: str) -> LoadJob:
        """Stops a load job (what it cached stays cached); a finished job is returned as
        it is."""
        reply = await self._view.call(
            "CancelJob", master_pb2.GetJobRequest(id=job_id), f"cancel job {job_id}"
        )
        return LoadJob.from_proto(reply)

    async def apply_dataset(self, document: Mapping[str, Any] | str | Path) -> Dataset:
        """Declares a dataset (a `Dataset` document: a mapping, YAML or JSON text, or a file);
        the leader mounts, syncs, preloads and keeps it. Applying the same document again
        changes nothing; a changed one changes only what changed."""
        request = master_pb2.ApplyDatasetRequest(
            document_json=json.dumps(document_of(document), default=str)
        )
        reply = await self._view.call("ApplyDataset", request, "apply a dataset")
        self._view.forget_all()
        return Dataset.from_proto(reply)

    async def datasets(self) -> list[Dataset]:
        reply = await self._view.call(
            "ListDatasets", master_pb2.ListDatasetsRequest(), "list datasets"
        )
        return [Dataset.from_proto(d) for d in reply.datasets]

    async def dataset(self, name: str) -> Dataset:
        """NotFound (a FileNotFoundError) for a dataset the cluster does not have."""
        reply = await self._view.call(
            "GetDataset", master_pb2.DatasetRef(name=name), f"dataset {name}"
        )
        return Dataset.from_proto(reply)

    async def delete_dataset(self, name: str, *, keep_cache: bool = False) -> Dataset:
        """Deletes a dataset: the leader unmounts it and, unless `keep_cache`, drops its
        cached blocks. Returns it marked deleting."""
        request = master_pb2.DeleteDatasetRequest(name=name, keep_cache=keep_cache)
        reply = await self._view.call("DeleteDataset", request, f"delete dataset {name}")
        return Dataset.from_proto(reply)

    async def drain(self, worker_id: str) -> LoadJob:
        """Starts draining a worker: nothing new goes to it, each block it holds is copied
        to its next home while it still serves, then it is marked drained and may stop.
        Returns the drain job (kind "drain"): follow it with `watch_job(job.id)`; a worker
        already draining answers its running job."""
        request = master_pb2.DrainRequest(worker_id=worker_id)
        reply = await self._view.call("Drain", request, f"drain worker {worker_id}")
        self._view.forget_workers()
        return LoadJob.from_proto(reply)

    async def undrain(self, worker_id: str) -> LoadJob:
        """Stops a worker's drain and puts it back in service (the copies made stay)."""
        request = master_pb2.DrainRequest(worker_id=worker_id)
        reply = await self._view.call("Undrain", request, f"undrain worker {worker_id}")
        self._view.forget_workers()
        return LoadJob.from_proto(reply)

    async def jobs(self) -> list[LoadJob]:
        """Every load job the cluster remembers, oldest first."""
        response = await self._view.call("ListJobs", master_pb2.ListJobsRequest(), "list jobs")
        return [LoadJob.from_proto(j) for j in response.jobs]

    # ---- cache rules: pin, TTL, free (master/cache_rules.py) -----------------------------

    async def pin(self, path: str) -> PinResult:
        """Keeps the files below `path` in the cache, never evicted, and starts loading
        them (`load_job_id`; see `watch_job`). ResourceExhausted when they do not fit."""
        reply = await self._view.call("Pin", master_pb2.PathRequest(path=path), f"pin {path}")
        return PinResult.from_proto(reply)

    async def unpin(self, path: str) -> CacheRule:
        """Lets the files below `path` be evicted again; returns what rule is left there
        (a TTL, if one was set)."""
        reply = await self._view.call("Unpin", master_pb2.PathRequest(path=path), f"unpin {path}")
        return CacheRule.from_proto(reply)

    async def set_ttl(self, path: str, ttl: float | str) -> CacheRule:
        """Blocks below `path` (a mount path: the whole mount) are not served once older
        than `ttl` (seconds, or a duration such as "30s", "6h", "7d"): read again from
        the under-store, and dropped first."""
        seconds = parse_duration(ttl) if isinstance(ttl, str) else float(ttl)
        if seconds <= 0:
            raise InvalidArgument("a TTL must be positive (clear it with clear_ttl)")
        request = master_pb2.SetTtlRequest(path=path, ttl_ms=max(1, int(seconds * 1000)))
        return CacheRule.from_proto(await self._view.call("SetTtl", request, f"ttl {path}"))

    async def clear_ttl(self, path: str) -> CacheRule:
        """Removes the TTL on `path`; returns what rule is left there (a pin, if any)."""
        reply = await self._view.call(
            "ClearTtl", master_pb2.PathRequest(path=path), f"clear ttl {path}"
        )
        return CacheRule.from_proto(reply)

    async def cache_rules(self) -> list[CacheRule]:
        """Every pin and TTL."""
        reply = await self._view.call(
            "ListCacheRules", master_pb2.ListCacheRulesRequest(), "list cache rules"
        )
        return [CacheRule.from_proto(r) for r in reply.rules]

    async def free(self, path: str) -> FreeResult:
        """Evicts the blocks below `path` from every worker now (pinned files are kept)."""
        reply = await self._view.call("Free", master_pb2.PathRequest(path=path), f"free {path}")
        return FreeResult.from_proto(path, reply)
