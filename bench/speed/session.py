"""One bench session on a running local cluster: measures a reader as a run of a row, with
the S3 server's request counts and the workers' cache stats around it, and the checks
that make a row count (bytes exact; warm: 0 S3 GETs; cold: worker misses)."""

from __future__ import annotations

from typing import Any

from .datasets import Dataset
from .readers import Reader
from .results import Row, Run, log
from .s3_servers import S3Choice

COLD, WARM = "cold", "warm"
STAT_KEYS = ("hits", "misses", "ufs_gets", "bytes_from_ufs", "evictions")


class Session:
    def __init__(self, cluster: Any, s3: S3Choice) -> None:
        self.cluster = cluster
        self.s3 = s3
        self.rows: list[Row] = []
        self._by_key: dict[tuple[str, str], Row] = {}
        self._stats_client: Any = None

    def row(self, dataset: str, system: str, note: str = "") -> Row:
        key = (dataset, system)
        if key not in self._by_key:
            self._by_key[key] = Row(dataset, system, note=note)
            self.rows.append(self._by_key[key])
        return self._by_key[key]

    def client(self, short_circuit: bool, data_port: bool = True) -> Any:
        from reservoir.client import Client
        from reservoir.common.config import ClientConfig

        config = ClientConfig(
            master=self.cluster.master_address, short_circuit=short_circuit, data_port=data_port
        )
        return Client(config=config)

    def worker_stats(self) -> dict[str, int]:
        if self._stats_client is None:
            self._stats_client = self.client(short_circuit=False)
        total: dict[str, int] = {}
        for s in self._stats_client.worker_stats():
            for key in STAT_KEYS:
                total[key] = total.get(key, 0) + int(getattr(s, key))
        return total

    def restart_workers(self) -> None:
        """Empty caches: stop every worker and start it again (same id and port)."""
        for name in self.cluster.worker_names():
            self.cluster.stop(name)
        for name in self.cluster.worker_names():
            self.cluster.start_worker(int(name.removeprefix("worker")))
        if self._stats_client is not None:
            self._stats_client.close()
            self._stats_client = None

    def close(self) -> None:
        if self._stats_client is not None:
            self._stats_client.close()

    def measure(
        self, row: Row, ds: Dataset, reader: Reader, cache: str | None = None, files: int = 0
    ) -> Run:
        """One run of `row`. `cache`: COLD or WARM for Reservoir rows (checked), None for
        rows that do not go through the workers. `files`: how many files the reader must
        return (default: the data set's)."""
        s3_before = self.cluster.s3_counts()
        cpu_before = self.s3.cpu_seconds(self.cluster)
        w_before = self.worker_stats() if cache else {}
        read = reader()
        w_after = self.worker_stats() if cache else {}
        cpu = self.s3.cpu_seconds(self.cluster) - cpu_before
        s3_after = self.cluster.s3_counts()
        expected_files = files or len(ds.sizes)
        expected_bytes = ds.nbytes * expected_files // len(ds.sizes)
        if read.files != expected_files or read.nbytes != expected_bytes:
            row.problems.append(
                f"read {read.files} files / {read.nbytes} bytes, expected "
                f"{expected_files} / {expected_bytes}"
            )
        if read.wrong:
            row.problems.append(f"bytes differ from the upload: {read.wrong[:3]}...")
        s3 = {k: s3_after.get(k, 0) - s3_before.get(k, 0) for k in set(s3_after) | set(s3_before)}
        workers = {k: w_after[k] - w_before.get(k, 0) for k in w_after}
        run = Run(
            read.seconds,
            read.nbytes,
            read.files,
            {k: v for k, v in s3.items() if v},
            workers,
            {**read.extra, "s3_server_cpu_s": round(cpu, 2)},
        )
        if cache == WARM and run.s3.get("GET", 0):
            row.problems.append(f"not warm: {run.s3['GET']} S3 GETs")
        if cache == COLD and not workers.get("misses", 0):
            row.problems.append("not cold: no worker misses")
        row.runs.append(run)
        log(
            f"  {row.dataset:<10} {row.system:<50} {run.seconds:7.2f}s {run.mb_s:8.1f} MB/s "
            f"{run.files_s:8.0f} files/s  s3={run.s3} misses={workers.get('misses', '-')} "
            f"s3cpu={cpu:.1f}s"
        )
        for p in row.problems:
            log(f"  (!) {row.system}: {p}")
        return run
