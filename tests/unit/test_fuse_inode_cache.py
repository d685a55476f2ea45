"""The FUSE mount's memory of inodes: as long as the kernel trusts attributes, bounded."""

from __future__ import annotations

import time

from reservoir.common.models import Inode
from reservoir.fuse.inode_cache import InodeCache


def _file(path: str, size: int = 1) -> Inode:
    return Inode(path=path, is_dir=False, size=size)


def test_an_inode_is_known_until_its_time_is_up() -> None:
    cache = InodeCache(ttl_s=0.2, max_entries=10)
    cache.put(_file("/d/a", size=7))
    assert cache.get("/d/a") == _file("/d/a", size=7)
    assert cache.get("/d/b") is None
    time.sleep(0.25)
    assert cache.get("/d/a") is None


def test_a_newer_inode_replaces_the_older_one() -> None:
    cache = InodeCache(ttl_s=60, max_entries=10)
    cache.put(_file("/d/a", size=1))
    cache.put(_file("/d/a", size=2))
    assert cache.get("/d/a") == _file("/d/a", size=2) and len(cache) == 1


def test_past_its_bound_the_least_recently_put_go_first() -> None:
    cache = InodeCache(ttl_s=60, max_entries=3)
    for name in "abcd":
        cache.put(_file(f"/d/{name}"))
    cache.put(_file("/d/b"))
    cache.put(_file("/d/e"))
    assert len(cache) == 3
    assert [n for n in "abcde" if cache.get(f"/d/{n}")] == ["b", "d", "e"]


def test_a_bound_of_zero_keeps_nothing() -> None:
    cache = InodeCache(ttl_s=60, max_entries=0)
    cache.put(_file("/d/a"))
    assert cache.get("/d/a") is None
