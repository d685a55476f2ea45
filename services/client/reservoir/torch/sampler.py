"""A sampler that reads what the cache holds first and has the cluster load the rest.

Each epoch is the permutation `DistributedSampler` would draw (seeded by seed + epoch,
split across ranks the same way, padded or cut the same way with `drop_last`); within this
rank's share, the files already cached come first, in permuted order, then the others, in
permuted order, which a load job started at the epoch's first index brings into the cache
in that same order. A partly cached data set so trains at cache speed while it warms,
and once it is all cached the order is DistributedSampler's, index for index."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils.data import Sampler

from reservoir.client import Client

from .cache_view import CacheView, ClusterCacheView
from .epoch_order import EpochShape, epoch_order
from .placement import DistributedPlace


class CacheAwareSampler(Sampler[int]):
    """Indices of `dataset_or_paths` (a Reservoir dataset, or the paths themselves, one per
    index), each once per epoch over the whole job, cached ones first.

    `cache` answers which files are cached and loads the others; by default a
    `ClusterCacheView` over `client` (or the dataset's client). `load=False` only
    reorders. `num_replicas`/`rank` default as for `DistributedSampler` (the process
    group), else torchrun's WORLD_SIZE/RANK, else a job of one. Call `set_epoch(e)`
    before each epoch, as with `DistributedSampler`."""

    def __init__(
        self,
        dataset_or_paths: Any,
        *,
        client: Client | None = None,
        cache: CacheView | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
        load: bool = True,
    ) -> None:
        self.paths = paths_of(dataset_or_paths)
        if cache is None:
            owner = client if client is not None else getattr(dataset_or_paths, "client", None)
            if not isinstance(owner, Client):
                raise ValueError(
                    "a CacheAwareSampler needs a client, a cache view, or a dataset with a client"
                )
            cache = ClusterCacheView(owner)
        self.cache = cache
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.load = load
        self.place = DistributedPlace.resolve(rank, num_replicas)
        self.epoch = 0
        self.cached_count = 0  # of this rank's share, cached when the epoch began
        self.query_seconds = 0.0  # what asking the cache cost at the epoch's start
        self.shape = EpochShape(len(self.paths), self.place.world_size, drop_last)
        self.num_samples = self.shape.per_rank
        self.total_size = self.shape.total

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def share(self) -> list[int]:
        """This rank's indices for the epoch in permuted order, before any reordering:
        `DistributedSampler`'s, with the same seed, epoch and ranks."""
        indices = epoch_order(self.shape, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle)
        return indices[self.place.rank : self.total_size : self.place.world_size]

    def __iter__(self) -> Iterator[int]:
        share = self.share()
        wanted = [self.paths[i] for i in share]
        started = time.perf_counter()
        flags = self.cache.cached(wanted) if wanted else []
        self.query_seconds = time.perf_counter() - started
        warm = [i for i, cached in zip(share, flags, strict=True) if cached]
        cold = [i for i, cached in zip(share, flags, strict=True) if not cached]
        self.cached_count = len(warm)
        if self.load and cold:
            self.cache.load(list(dict.fromkeys(self.paths[i] for i in cold)))
        yield from warm
        yield from cold


def paths_of(dataset_or_paths: Any) -> list[str]:
    paths = getattr(dataset_or_paths, "paths", dataset_or_paths)
    if isinstance(paths, str) or not isinstance(paths, Sequence):
        raise TypeError(
            "a sampler takes a Reservoir dataset or a sequence of paths, "
            f"not {type(dataset_or_paths).__name__}"
        )
    return list(paths)
