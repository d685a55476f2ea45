"""The workers a client routes around for a while after one failed it (a refused
connection, a deadline, bytes that failed their checksum): one box for every route, so a
worker that failed over gRPC is not asked first over its data port either, and the other
way round. A penalised worker is still asked, last: it may be the only one holding a block."""

from __future__ import annotations

import threading
import time

from reservoir.common.models import WorkerRecord


class PenaltyBox:
    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()  # threads of the blocking client put workers in too

    def penalise(self, worker_id: str) -> None:
        with self._lock:
            self._until[worker_id] = time.monotonic() + self._seconds

    def holds(self, worker_id: str) -> bool:
        until = self._until.get(worker_id)
        if until is None:
            return False
        if until > time.monotonic():
            return True
        with self._lock:
            if self._until.get(worker_id, 0.0) <= time.monotonic():
                self._until.pop(worker_id, None)
        return False

    def empty(self) -> bool:
        """Nobody penalised (the usual case, checked before ordering anything). Expired
        penalties go here too: a worker that left is never asked about again."""
        if self._until:
            now = time.monotonic()
            with self._lock:
                self._until = {w: t for w, t in self._until.items() if t > now}
        return not self._until

    def healthy_first(self, order: list[WorkerRecord]) -> list[WorkerRecord]:
        """`order` with the penalised workers moved to the end, each part in its order."""
        if not self._until:
            return order
        held = {w.id for w in order if self.holds(w.id)}
        return [w for w in order if w.id not in held] + [w for w in order if w.id in held]
