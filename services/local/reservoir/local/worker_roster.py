"""Which workers a local cluster has, and the options each was started with.

`local up --workers N` starts worker1…workerN with the cluster's options; `local add-worker`
adds the next one with options of its own, `local remove-worker` takes one out, so the
numbers need not be contiguous. The roster is recorded in the cluster's settings (key
`roster`: worker name -> the options it was given), which is what `local up --resume`
starts again: each worker with its own options, none that was removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

ROSTER = "roster"  # the settings key


@dataclass(frozen=True)
class WorkerOptions:
    """A worker's own options; None: the cluster's (`local up --capacity` …)."""

    capacity: str | None = None
    shm: bool | None = None
    disk_capacity: str | None = None
    # The host id it reports (RESERVOIR_HOST): one machine standing for several hosts,
    # as tests and benches of locality need. Empty: the machine's host name.
    host: str | None = None

    def record(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> WorkerOptions:
        return cls(
            **{k: data[k] for k in ("capacity", "shm", "disk_capacity", "host") if k in data}
        )

    def over(self, settings: Mapping[str, Any]) -> WorkerOptions:
        """These options, each left out taken from the cluster's `settings`."""
        return WorkerOptions(
            capacity=str(self.capacity or settings.get("capacity") or "1GiB"),
            shm=bool(settings.get("shm")) if self.shm is None else self.shm,
            disk_capacity=(
                str(settings.get("disk_capacity") or "")
                if self.disk_capacity is None
                else self.disk_capacity
            ),
            host=self.host,
        )


def is_worker(name: str) -> bool:
    return name.startswith("worker") and name[6:].isdigit()


def worker_number(name: str) -> int:
    return int(name[6:])


def worker_name(n: int) -> str:
    return f"worker{n}"


def next_worker(names: Iterable[str]) -> str:
    """The name an added worker takes: one past the highest in use."""
    return worker_name(max((worker_number(n) for n in names if is_worker(n)), default=0) + 1)


def roster(settings: Mapping[str, Any]) -> dict[str, WorkerOptions]:
    """The cluster's workers by name, in number order. A cluster recorded before rosters
    were (no `roster` key) has worker1…workerN with the cluster's options."""
    recorded = settings.get(ROSTER)
    if not recorded:
        count = int(settings.get("workers", 0))
        return {worker_name(n): WorkerOptions() for n in range(1, count + 1)}
    ordered = sorted(recorded, key=worker_number)
    return {name: WorkerOptions.from_record(recorded[name]) for name in ordered}


def options_of(settings: Mapping[str, Any], name: str) -> WorkerOptions:
    """What worker `name` runs with: its own options over the cluster's."""
    return roster(settings).get(name, WorkerOptions()).over(settings)


def with_worker(settings: dict[str, Any], name: str, options: WorkerOptions | None) -> None:
    """Records `name` in the roster with `options`, or (None) takes it out; `workers`
    follows, so `local up --resume --workers N` is compared with the count it has."""
    workers = {n: o.record() for n, o in roster(settings).items()}
    if options is None:
        workers.pop(name, None)
    else:
        workers[name] = options.record()
    settings[ROSTER] = workers
    settings["workers"] = len(workers)
