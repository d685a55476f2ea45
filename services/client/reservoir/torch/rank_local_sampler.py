"""A distributed sampler that gives each rank the samples its own host holds.

Each epoch is `DistributedSampler`'s permutation (seed + epoch, padded or cut the same
way), split so that rank r gets, as far as balance allows, the samples cached on its host
(`assign_ranks`): co-located ranks then read through short-circuit or their own host's
worker instead of across the network. Every rank gets the same count and the ranks
together read every sample once. Where nothing is cached on any rank's host, the split is
`DistributedSampler`'s, index for index."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch.utils.data import Sampler

from reservoir.client import Client

from .epoch_order import EpochShape, epoch_order
from .placement import DistributedPlace
from .rank_assignment import assign_ranks, local_fraction
from .sample_hosts import hosts_of_samples
from .sampler import paths_of

Locate = Callable[[Sequence[str]], list[frozenset[str]]]


class DistributedCacheAwareSampler(Sampler[int]):
    """Indices of `dataset` (a Reservoir dataset, or its paths), each once per epoch over
    the whole job, each rank's mostly the ones its own host holds.

    Every rank must compute the same split, so every rank needs the same two inputs:
    - `hosts`, rank -> host id (as workers' RESERVOIR_HOST). Given, it is used as is;
      left out with a `torch.distributed` process group initialized, it is gathered with
      `all_gather_object` of each rank's own host (the client's `host` setting,
      RESERVOIR_HOST); left out in a job of one, it is this process's host.
    - which hosts hold each sample (`locate(paths)`, by default the master's block
      locations through `client` or the dataset's client), asked at the start of each
      epoch. With a process group, rank 0 asks and broadcasts the answer, so a cache that
      changes meanwhile cannot split the ranks' views; without one, each rank asks itself.

    `num_replicas`/`rank` default as for `DistributedSampler`. Call `set_epoch(e)` before
    each epoch."""

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        hosts: Sequence[str] | None = None,
        client: Client | None = None,
        locate: Locate | None = None,
    ) -> None:
        self.paths = paths_of(dataset)
        owner = client if client is not None else getattr(dataset, "client", None)
        if locate is None:
            if not isinstance(owner, Client):
                raise ValueError(
                    "a DistributedCacheAwareSampler needs a client, a locate function, "
                    "or a dataset with a client"
                )
            client_of_locations = owner

            def locate(paths: Sequence[str]) -> list[frozenset[str]]:
                return hosts_of_samples(client_of_locations, paths)

        self.locate: Locate = locate
        self.place = DistributedPlace.resolve(rank, num_replicas)
        own_host = owner.config.host if isinstance(owner, Client) else ""
        self.hosts = list(hosts) if hosts is not None else _gathered_hosts(self.place, own_host)
        if len(self.hosts) != self.place.world_size:
            raise ValueError(
                f"hosts names {len(self.hosts)} ranks' hosts; the job has {self.place.world_size}"
            )
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.shape = EpochShape(len(self.paths), self.place.world_size, drop_last)
        self.num_samples = self.shape.per_rank
        self.local_fraction = 0.0  # of the whole job's epoch, on their rank's own host

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def shares(self) -> list[list[int]]:
        """Every rank's indices for this epoch (rank r iterates `shares()[r]`)."""
        order = epoch_order(self.shape, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle)
        where = _shared_from_rank0(lambda: self.locate(self.paths) if order else [])
        if not order:
            return [[] for _ in self.hosts]
        shares = assign_ranks(order, where, self.hosts)
        self.local_fraction = local_fraction(shares, where, self.hosts)
        return shares

    def __iter__(self) -> Iterator[int]:
        return iter(self.shares()[self.place.rank])


def _process_group() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def _gathered_hosts(place: DistributedPlace, own_host: str) -> list[str]:
    dist = _process_group()
    if dist is not None:
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, own_host)
        return [str(h) for h in gathered]
    if place.world_size == 1:
        return [own_host]
    raise ValueError(
        "a DistributedCacheAwareSampler of several ranks needs `hosts` (rank -> host) "
        "or an initialized torch.distributed process group to gather them from"
    )


def _shared_from_rank0(ask: Callable[[], list[frozenset[str]]]) -> list[frozenset[str]]:
    dist = _process_group()
    if dist is None:
        return ask()
    box: list[Any] = [ask() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return list(box[0])
