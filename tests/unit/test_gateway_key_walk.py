"""The gateway's key walk against S3's listing semantics computed the plain way (sort every
key, filter, group): for any set of keys the namespace can hold, any prefix, delimiter and
start-after, the walk yields the same keys and common prefixes in the same order.

The walk reads the namespace through a client; here that client is an in-memory tree with
the master's paging contract (names in code point order, `start_after` seeks), so the
walk itself, its held-back directories, seeks and stats, is what runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from hypothesis import given, settings
from hypothesis import strategies as st

from reservoir.common.errors import NotADirectory, NotFound
from reservoir.common.models import Inode
from reservoir.gateway.key_walk import KeyWalk


class Tree:
    """The namespace of one bucket, `/b`, as the master lists it."""

    def __init__(self, keys: list[str]) -> None:
        self.files = {f"/b/{k}" for k in keys}
        self.dirs = {"/b"} | {
            "/b/" + "/".join(k.split("/")[:i]) for k in keys for i in range(1, k.count("/") + 1)
        }
        self.calls = 0

    def _inode(self, path: str) -> Inode:
        return Inode(path, path in self.dirs, size=1, etag="e")

    async def stat(self, path: str, fresh: bool = False) -> Inode:
        if path not in self.files and path not in self.dirs:
            raise NotFound(path)
        return self._inode(path)

    async def iter_ls(
        self, path: str, *, page_size: int, start_after: str = ""
    ) -> AsyncIterator[Inode]:
        if path in self.files:
            raise NotADirectory(path)
        if path not in self.dirs:
            raise NotFound(path)
        self.calls += 1
        children = sorted(
            p.rsplit("/", 1)[1]
            for p in self.files | self.dirs
            if p.rsplit("/", 1)[0] == path and p != path
        )
        for name in children:
            if name > start_after:
                yield self._inode(f"{path}/{name}")


def s3_listing(keys: list[str], prefix: str, delimiter: str, after: str) -> list[str]:
    """S3's answer: keys after `after` starting with `prefix`, those holding the
    delimiter past the prefix rolled into common prefixes (a common prefix at or before
    `after` is not repeated: the gateway resumes past it)."""
    out: list[str] = []
    for key in sorted(keys):
        if not key.startswith(prefix) or key <= after:
            continue
        cut = key.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:
            common = key[: cut + len(delimiter)]
            if common > after and (not out or out[-1] != common):
                out.append(common)
        else:
            out.append(key)
    return out


def holdable(keys: list[str]) -> bool:
    """Whether the namespace can hold these keys: no `.` or `..` component, and no key is
    also a directory of another."""
    paths = set(keys)
    if any(part in (".", "..") for k in keys for part in k.split("/")):
        return False
    return not any(
        "/".join(k.split("/")[:i]) in paths for k in keys for i in range(1, k.count("/") + 1)
    )


NAME = st.text(alphabet="ab-.!0é", min_size=1, max_size=3)
KEY = st.lists(NAME, min_size=1, max_size=3).map("/".join)
KEYS = st.lists(KEY, min_size=1, max_size=25, unique=True).filter(holdable)


def walk(keys: list[str], prefix: str, delimiter: str, after: str) -> list[str]:
    async def run() -> list[str]:
        items = KeyWalk(Tree(keys), "b", page_size=4).items(prefix, delimiter, after)  # type: ignore[arg-type]
        return [item.key async for item in items]

    return asyncio.run(run())


@settings(max_examples=200, deadline=None)
@given(keys=KEYS, data=st.data())
def test_the_walk_lists_what_s3_lists(keys: list[str], data: st.DataObject) -> None:
    around = sorted({k[:i] for k in keys for i in range(len(k) + 1)})
    prefix = data.draw(st.sampled_from(around), label="prefix")
    delimiter = data.draw(st.sampled_from(["", "/", "-", "a/"]), label="delimiter")
    after = data.draw(st.sampled_from(["", *around, *keys]), label="after")
    assert walk(keys, prefix, delimiter, after) == s3_listing(keys, prefix, delimiter, after)


def test_resuming_after_each_page_gives_the_whole_listing_once() -> None:
    keys = ["a-b", "a.c", "a/x", "a/y/z", "a/y-1", "a!/q", "b", "c/d/e", "c/d-", "é/x"]
    for delimiter in ("", "/"):
        whole = s3_listing(keys, "", delimiter, "")
        resumed: list[str] = []
        after = ""
        while True:
            page = walk(keys, "", delimiter, after)[:2]
            if not page:
                break
            resumed += page
            after = page[-1]
        assert resumed == whole
