"""Datasets over Reservoir paths, in the style of s3torchconnector's S3MapDataset and
S3IterableDataset: built from a prefix (every file below it, sorted), each item
`transform(path, data)`, `(path, data)` by default, with `data` the file's bytes.

A dataset holds a `Client`, which pickles as its configuration and opens its own channels
in each DataLoader worker process, forked or spawned."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from torch.utils.data import Dataset, IterableDataset, get_worker_info

from reservoir.client import Client

from .listing import dataset_path, files_below
from .placement import DistributedPlace

Transform = Callable[[str, bytes], Any]


def path_and_bytes(path: str, data: bytes) -> tuple[str, bytes]:
    """The default item: the file's path and its contents."""
    return path, data


def _client(client: Client | None, master: str | None) -> Client:
    if client is not None and master is not None:
        raise ValueError("give a client or a master address, not both")
    return client if client is not None else Client(master)


class ReservoirMapDataset(Dataset[Any]):
    """Map-style: item `i` is the `i`th file. `DataLoader` fetches a whole batch with
    `__getitems__`, one `read_many` (small files batched into few worker calls)."""

    def __init__(
        self, paths: Sequence[str], *, client: Client, transform: Transform | None = None
    ) -> None:
        self.paths = [dataset_path(p) for p in paths]
        self.client = client
        self.transform: Transform = transform or path_and_bytes

    @classmethod
    def from_prefix(
        cls,
        path: str,
        *,
        client: Client | None = None,
        master: str | None = None,
        transform: Transform | None = None,
    ) -> ReservoirMapDataset:
        """Every file below `path` (a path or a `reservoir://` URL), recursively, sorted.
        The master is `master`, or found as `Client()` finds it."""
        rs = _client(client, master)
        return cls(files_below(rs, path), client=rs, transform=transform)

    @classmethod
    def from_paths(
        cls,
        paths: Sequence[str],
        *,
        client: Client | None = None,
        master: str | None = None,
        transform: Transform | None = None,
    ) -> ReservoirMapDataset:
        """These files (paths or `reservoir://` URLs), in this order."""
        return cls(paths, client=_client(client, master), transform=transform)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Any:
        path = self.paths[index]
        return self.transform(path, self.client.read(path))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """A batch of items in one batched read: what `DataLoader` calls for a batch."""
        chosen = [self.paths[i] for i in indices]
        return [
            self.transform(p, d) for p, d in zip(chosen, self.client.read_many(chosen), strict=True)
        ]


class ReservoirIterableDataset(IterableDataset[Any]):
    """Iterable: the files in order, each read once per pass, split across DataLoader
    worker processes and across the ranks of a distributed job (every file goes to exactly
    one worker of one rank). Reads run ahead of the consumer: up to `prefetch` files in
    batches of `read_batch`, each batch one `read_many`.

    The rank and world size are the arguments, else those of the initialised
    `torch.distributed` process group, else torchrun's RANK and WORLD_SIZE, taken when
    the dataset is made (build it after `init_process_group`)."""

    def __init__(
        self,
        paths: Sequence[str],
        *,
        client: Client,
        transform: Transform | None = None,
        prefetch: int = 256,
        read_batch: int = 32,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if read_batch < 1 or prefetch < 1:
            raise ValueError("prefetch and read_batch must be at least 1")
        self.paths = [dataset_path(p) for p in paths]
        self.client = client
        self.transform: Transform = transform or path_and_bytes
        self.prefetch = prefetch
        self.read_batch = read_batch
        self.place = DistributedPlace.resolve(rank, world_size)

    @classmethod
    def from_prefix(
        cls,
        path: str,
        *,
        client: Client | None = None,
        master: str | None = None,
        transform: Transform | None = None,
        prefetch: int = 256,
        read_batch: int = 32,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> ReservoirIterableDataset:
        """Every file below `path` (a path or a `reservoir://` URL), recursively, sorted."""
        rs = _client(client, master)
        return cls(
            files_below(rs, path),
            client=rs,
            transform=transform,
            prefetch=prefetch,
            read_batch=read_batch,
            rank=rank,
            world_size=world_size,
        )

    def shard(self) -> list[str]:
        """The files this DataLoader worker of this rank reads: one of
        `world_size * num_workers` interleaved shards."""
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        shards = self.place.world_size * workers
        return self.paths[self.place.rank * workers + worker :: shards]

    def __iter__(self) -> Iterator[Any]:
        mine = self.shard()
        batches = deque(mine[i : i + self.read_batch] for i in range(0, len(mine), self.read_batch))
        in_flight: deque[tuple[list[str], Future[list[bytes]]]] = deque()
        depth = max(1, self.prefetch // self.read_batch)
        pool = ThreadPoolExecutor(depth, thread_name_prefix="reservoir-prefetch")
        try:
            while batches or in_flight:
                while batches and len(in_flight) < depth:
                    batch = batches.popleft()
                    in_flight.append((batch, pool.submit(self.client.read_many, batch)))
                batch, reading = in_flight.popleft()
                for path, data in zip(batch, reading.result(), strict=True):
                    yield self.transform(path, data)
        finally:
            # A consumer that stops early (break, an error) leaves reads it will never use.
            pool.shutdown(wait=False, cancel_futures=True)
