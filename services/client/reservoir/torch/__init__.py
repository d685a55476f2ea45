"""PyTorch over Reservoir: datasets in the style of s3torchconnector, and a sampler that
reads what the cache holds first while the cluster loads the rest.

    from torch.utils.data import DataLoader
    from reservoir.torch import CacheAwareSampler, ReservoirMapDataset

    dataset = ReservoirMapDataset.from_prefix("reservoir:///datasets/train")
    sampler = CacheAwareSampler(dataset)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=4)

Needs the `torch` extra (`pip install 'reservoir-cache[torch]'`).
"""

from __future__ import annotations

from .cache_view import CacheView, ClusterCacheView
from .datasets import ReservoirIterableDataset, ReservoirMapDataset
from .listing import dataset_path, files_below
from .placement import DistributedPlace
from .rank_assignment import assign_ranks
from .rank_local_sampler import DistributedCacheAwareSampler
from .sampler import CacheAwareSampler

__all__ = [
    "CacheAwareSampler",
    "CacheView",
    "ClusterCacheView",
    "DistributedCacheAwareSampler",
    "DistributedPlace",
    "ReservoirIterableDataset",
    "ReservoirMapDataset",
    "assign_ranks",
    "dataset_path",
    "files_below",
]
