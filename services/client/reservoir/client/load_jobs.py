"""What the SDK returns for warm-up work: a load job's record and a metadata load's
progress, as frozen dataclasses built from the master's replies (never the protobuf
messages themselves: those are the wire format, not the API)."""

from __future__ import annotations

import datetime
import enum
import math
from dataclasses import dataclass

from reservoir.common.config import format_size
from reservoir.v1 import master_pb2


class JobState(enum.StrEnum):
    """Where a load job is. A `str`, so `job.state == "completed"` holds as well."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """Whether the job has ended (completed, failed or cancelled)."""
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


def _moment(ms: int) -> datetime.datetime | None:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC) if ms else None


@dataclass(frozen=True, slots=True)
class LoadJob:
    """A load job as the master last recorded it (`submit_load`, `job`, `watch_job`).

    Counts are of the blocks and bytes the job set out to cache (`total_*`) and of those
    a worker confirmed it holds (`done_*`); `errors` is a sample of what failed. Times
    are milliseconds since the epoch on the master's clock, as `created`/`updated`
    datetimes (UTC) too.
    """

    id: str
    path: str
    state: JobState
    replicas: int = 1
    priority_paths: tuple[str, ...] = ()
    metadata_only: bool = False
    total_files: int = 0
    total_blocks: int = 0
    total_bytes: int = 0
    done_blocks: int = 0
    done_bytes: int = 0
    failed_blocks: int = 0
    errors: tuple[str, ...] = ()
    created_ms: int = 0
    updated_ms: int = 0
    attempts: int = 0  # how many masters have run it (it resumes after a failover)
    named_files: bool = False  # it loads the files its request named, not all below `path`
    # "load"; "drain" (copies `worker`'s blocks to their next homes), "fill" (copies
    # onto `worker`, which joined, the blocks it is now home of) or "repair" (copies again
    # the replicated blocks `worker` held when it was lost).
    kind: str = "load"
    worker: str = ""

    @classmethod
    def from_proto(cls, msg: master_pb2.Job) -> LoadJob:
        return cls(
            id=msg.id,
            path=msg.path,
            state=JobState(msg.state),
            replicas=msg.replicas,
            priority_paths=tuple(msg.priority_paths),
            metadata_only=msg.metadata_only,
            total_files=msg.total_files,
            total_blocks=msg.total_blocks,
            total_bytes=msg.total_bytes,
            done_blocks=msg.done_blocks,
            done_bytes=msg.done_bytes,
            failed_blocks=msg.failed_blocks,
            errors=tuple(msg.errors),
            created_ms=msg.created_ms,
            updated_ms=msg.updated_ms,
            attempts=msg.attempts,
            named_files=msg.named_files,
            kind=msg.kind or "load",
            worker=msg.worker,
        )

    @property
    def finished(self) -> bool:
        """Whether the job has ended; `state` says how."""
        return self.state.finished

    @property
    def succeeded(self) -> bool:
        """Whether it ended with every block cached."""
        return self.state is JobState.COMPLETED

    @property
    def fraction_done(self) -> float:
        """Bytes cached of the bytes to cache, 0.0 to 1.0 (a job with nothing to cache is
        1.0 once completed)."""
        if self.total_bytes > 0:
            return min(self.done_bytes / self.total_bytes, 1.0)
        return 1.0 if self.succeeded else 0.0

    @property
    def created(self) -> datetime.datetime | None:
        return _moment(self.created_ms)

    @property
    def updated(self) -> datetime.datetime | None:
        return _moment(self.updated_ms)

    @property
    def elapsed_s(self) -> float:
        """Seconds from its submission to its last recorded change (both on the master's
        clock, so a client's clock never skews it)."""
        return max(self.updated_ms - self.created_ms, 0) / 1000

    @property
    def bytes_per_second(self) -> float | None:
        """The byte rate since the job started; None before any byte landed."""
        if self.done_bytes <= 0 or self.elapsed_s <= 0:
            return None
        return self.done_bytes / self.elapsed_s

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the rate so far (as of `updated`); 0.0 once finished, None
        while there is no rate to go by."""
        if self.finished:
            return 0.0
        rate = self.bytes_per_second
        if rate is None:
            return None
        return max(self.total_bytes - self.done_bytes, 0) / rate

    @property
    def _what(self) -> str:
        if self.kind == "load":
            return f"load job {self.id} {self.path}"
        return f"{self.kind} job {self.id} of worker {self.worker}"

    def __str__(self) -> str:
        percent = math.floor(100 * self.fraction_done)
        text = (
            f"{self._what}: {self.state} {percent}%"
            f" ({format_size(self.done_bytes)} of {format_size(self.total_bytes)},"
            f" {self.done_blocks}/{self.total_blocks} blocks, {self.failed_blocks} failed)"
        )
        if self.errors and self.finished:
            text += f"; first error: {self.errors[0]}"
        return text


@dataclass(frozen=True, slots=True)
class MetadataLoadProgress:
    """How far a metadata load (`load_metadata`) has come: objects and prefixes seen in
    the under-store, inodes written, inodes removed because their object is gone."""

    listed: int = 0
    written: int = 0
    removed: int = 0
    elapsed_ms: int = 0
    done: bool = False

    @classmethod
    def from_proto(cls, msg: master_pb2.LoadMetadataProgress) -> MetadataLoadProgress:
        return cls(msg.listed, msg.written, msg.removed, msg.elapsed_ms, msg.done)

    def __str__(self) -> str:
        return (
            f"metadata: listed {self.listed}, written {self.written}, removed {self.removed}"
            f" in {self.elapsed_ms / 1000:.1f}s{' (done)' if self.done else ''}"
        )
