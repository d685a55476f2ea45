"""One epoch's order over a whole job, as `DistributedSampler` draws it: a permutation
seeded by seed + epoch (or 0..n-1 unshuffled), cut (`drop_last`) or padded with its own
first indices to the same count on every rank."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class EpochShape:
    """How many samples each rank takes: the same on every rank (DDP's collectives need it)."""

    samples: int  # in the data set
    world_size: int
    drop_last: bool = False

    @property
    def per_rank(self) -> int:
        n, replicas = self.samples, self.world_size
        if self.drop_last and n % replicas:
            return math.ceil((n - replicas) / replicas)
        return math.ceil(n / replicas)

    @property
    def total(self) -> int:
        return self.per_rank * self.world_size


def epoch_order(shape: EpochShape, *, seed: int, epoch: int, shuffle: bool) -> list[int]:
    """The epoch's `shape.total` indices in order; rank r's `DistributedSampler` share is
    `order[r::world_size]`."""
    n = shape.samples
    if shuffle:
        generator = torch.Generator()
        generator.manual_seed(seed + epoch)
        indices: list[int] = torch.randperm(n, generator=generator).tolist()
    else:
        indices = list(range(n))
    if shape.drop_last:
        return indices[: shape.total]
    if indices:
        padding = shape.total - n
        indices += (indices * math.ceil(padding / n))[:padding]
    return indices
