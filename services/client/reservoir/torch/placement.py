"""Where this process stands in a distributed job: its rank and the number of ranks."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DistributedPlace:
    rank: int
    world_size: int

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"rank {self.rank} and world size {self.world_size}: need 0 <= rank < world_size"
            )

    @classmethod
    def resolve(cls, rank: int | None = None, world_size: int | None = None) -> DistributedPlace:
        """What was given; else the initialised `torch.distributed` process group; else
        torchrun's RANK and WORLD_SIZE; else a job of one."""
        if rank is not None and world_size is not None:
            return cls(rank, world_size)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            known = (dist.get_rank(), dist.get_world_size())
        else:
            known = (int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))
        return cls(
            known[0] if rank is None else rank, known[1] if world_size is None else world_size
        )
