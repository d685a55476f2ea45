"""Which hosts hold each sample, from the master's block-location table: the hosts of the
workers holding the most of a file's blocks (a one-block file: every host holding it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from reservoir.client import Client
from reservoir.common import logs
from reservoir.common.errors import ReservoirError

log = logs.get_logger(__name__)

NOWHERE: frozenset[str] = frozenset()


def hosts_of_samples(client: Client, paths: Sequence[str]) -> list[frozenset[str]]:
    """Per path, the hosts holding most of it; every entry empty when the cluster cannot
    say (a training job never stops for this: it then reads as `DistributedSampler`)."""
    try:
        host_of = {w.id: w.host for w in client.workers()}
        inodes = client.stat_many(list(paths), with_locations=True)
    except ReservoirError as exc:
        log.warning("sample_hosts_unknown", files=len(paths), error=str(exc))
        return [NOWHERE] * len(paths)
    found: list[frozenset[str]] = []
    for inode in inodes:
        held: Counter[str] = Counter()
        for holders in inode.locations.values():
            held.update({host_of[w] for w in holders if host_of.get(w)})
        most = max(held.values(), default=0)
        found.append(frozenset(h for h, n in held.items() if n == most) if most else NOWHERE)
    return found
