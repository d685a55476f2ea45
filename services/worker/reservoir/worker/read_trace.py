"""Read attributes on a worker call's span: which worker, hit or miss, from where, how
many bytes. Only when spans are recorded (traces exported over OTLP); otherwise the span
is the API's no-op one and this costs a context lookup."""

from __future__ import annotations

from opentelemetry import trace

from .counters import UFS


class ReadTrace:
    """The blocks of one call (one for ReadBlock/ReadSmall, many for ReadBlocks), put on
    the call's span as each is served: a caller that has all it asked for may end the
    stream before the handler runs on, and its span ends with it."""

    def __init__(self, worker_id: str) -> None:
        self._span = trace.get_current_span()
        self.recording = self._span.is_recording()
        self._worker_id = worker_id
        self._hits = self._misses = self._bytes = 0
        self._sources: set[str] = set()

    def add(self, source: str, nbytes: int) -> None:
        if not self.recording:
            return
        if source == UFS:
            self._misses += 1
        else:
            self._hits += 1
        self._bytes += nbytes
        self._sources.add(source)
        cache = "hit" if self._misses == 0 else "miss" if self._hits == 0 else "partial"
        self._span.set_attributes(
            {
                "reservoir.worker": self._worker_id,
                "reservoir.cache": cache,
                "reservoir.source": ",".join(sorted(self._sources)),
                "reservoir.bytes": self._bytes,
                "reservoir.blocks": self._hits + self._misses,
                "reservoir.hits": self._hits,
                "reservoir.misses": self._misses,
            }
        )
