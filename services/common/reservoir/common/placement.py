"""Block placement by weighted rendezvous hashing.

Every client and the master compute the same home workers for a block from the same
live-worker list, without asking anyone. Adding or removing a worker moves only the blocks
whose top choice changes (about 1/N of them).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Candidate:
    id: str
    weight: float = 1.0


def block_key(file_id: str, index: int) -> bytes:
    return f"{file_id}:{index}".encode()


def _score(key: bytes, worker_id: str, weight: float) -> float:
    digest = hashlib.blake2b(key + b"|" + worker_id.encode(), digest_size=8).digest()
    # Map the hash into (0, 1) and use the logarithmic method, so a worker with twice the
    # weight wins twice as often.
    unit = (int.from_bytes(digest, "big") + 1) / (2**64 + 1)
    return -weight / math.log(unit)


def rank(key: bytes, workers: Sequence[Candidate]) -> list[str]:
    """Worker ids from the block's first home to its last."""
    scored = sorted(workers, key=lambda w: (-_score(key, w.id, max(w.weight, 1e-9)), w.id))
    return [w.id for w in scored]
