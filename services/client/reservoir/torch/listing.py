"""A data set's files: every file below a path, found recursively, in a fixed order."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from reservoir.client import Client
from reservoir.common import paths

SCHEME = "reservoir://"


def dataset_path(url: str) -> str:
    """A Reservoir path from a path or a `reservoir://` URL: `reservoir:///datasets/x` and
    `reservoir://datasets/x` both name `/datasets/x`, as with fsspec."""
    if url.startswith(SCHEME):
        url = "/" + url[len(SCHEME) :].lstrip("/")
    return paths.normalize(url)


def files_below(client: Client, path: str, *, parallelism: int = 8) -> list[str]:
    """Every file at or below `path`, sorted: the same list in every process and rank.

    Directories of one level are listed together (`parallelism` calls in flight), so a
    data set of a thousand class directories costs a thousand calls, not a thousand
    round trips one after another."""
    top = client.stat(dataset_path(path))
    if not top.is_dir:
        return [top.path]
    found: list[str] = []
    level = [top.path]
    with ThreadPoolExecutor(parallelism, thread_name_prefix="reservoir-ls") as pool:
        while level:
            below: list[str] = []
            for entries in pool.map(client.ls, level):
                for entry in entries:
                    (below if entry.is_dir else found).append(entry.path)
            level = below
    return sorted(found)
