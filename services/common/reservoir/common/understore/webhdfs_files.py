"""HDFS file operations as the webhdfs:// store composes them, by absolute HDFS path: status,
listings, reads and writes, and the moves, deletes and prunes its writes are made of. One
WebHDFS operation each (`webhdfs_requests.py` sends them), except where a step of HDFS's
needs two (a move makes the destination's parents first)."""

from __future__ import annotations

import asyncio
from pathlib import PurePosixPath

from reservoir.common import logs
from reservoir.common.errors import NotFound, ReservoirError
from reservoir.common.understore.webhdfs_gets import HdfsGets
from reservoir.common.understore.webhdfs_requests import JsonObject, WebHdfsRequests

log = logs.get_logger(__name__)

Statuses = list[JsonObject]


def token_of(status: JsonObject) -> str:
    """A file's change token: its modification time and length."""
    return f"{int(status['modificationTime']):x}-{int(status['length']):x}"


def size_in(token: str) -> int | None:
    """The length a change token carries (None for a token that is not one of ours)."""
    try:
        return int(token.rpartition("-")[2], 16)
    except ValueError:
        return None


def parent_of(path: str) -> str:
    return str(PurePosixPath(path).parent)


class HdfsFiles:
    def __init__(self, requests: WebHdfsRequests, gets: HdfsGets) -> None:
        self.requests = requests
        self._gets = gets

    # ---- reads ---------------------------------------------------------------------------

    def status(self, path: str, what: str) -> JsonObject:
        status: JsonObject = self.requests.call("GET", path, "GETFILESTATUS", what)["FileStatus"]
        return status

    def children(self, path: str, what: str) -> Statuses:
        """LISTSTATUS: a directory's entries (a file's own status, its `pathSuffix` "")."""
        listed: Statuses = self.requests.call("GET", path, "LISTSTATUS", what)["FileStatuses"][
            "FileStatus"
        ]
        return listed

    def batch(self, path: str, after: str, what: str) -> tuple[Statuses, int]:
        """LISTSTATUS_BATCH: the entries after `after` ("": from the first), as many as the
        namenode gives at once (its dfs.ls.limit), and how many remain."""
        params = {"startAfter": after} if after else {}
        reply = self.requests.call("GET", path, "LISTSTATUS_BATCH", what, params)
        listing = reply["DirectoryListing"]
        entries: Statuses = listing["partialListing"]["FileStatuses"]["FileStatus"]
        return entries, int(listing["remainingEntries"])

    async def read_into(self, path: str, offset: int, out: memoryview, what: str) -> int:
        """OPEN: `len(out)` bytes from `offset` into `out` (fewer only at the file's end;
        HDFS refuses an offset past it)."""
        return await self._gets.get_into(path, offset, out, "", what=what)

    def read(self, path: str, offset: int, length: int, what: str) -> bytes:
        """`read_into` a new buffer, for a blocking caller (on a loop of its own)."""
        buffer = memoryview(bytearray(length))
        # Sliced, never resized: a thread of the GET stack may still hold a view of it.
        return bytes(buffer[: asyncio.run(self.read_into(path, offset, buffer, what))])

    # ---- writes --------------------------------------------------------------------------

    def create(self, path: str, data: bytes, what: str) -> None:
        """The file written whole (made, or replaced), its parents made as needed."""
        self.requests.create(path, data, what)

    def copy(self, source: str, destination: str, size: int, what: str) -> None:
        self.requests.copy(source, destination, size, what)

    def mkdirs(self, path: str, what: str) -> None:
        self.requests.call("PUT", path, "MKDIRS", what)

    def concat(self, target: str, sources: list[str], what: str) -> None:
        """CONCAT: `sources` (non-empty files beside `target`) appended to it, and gone."""
        params = {"sources": ",".join(sources)}
        self.requests.call("POST", target, "CONCAT", what, params, idempotent=False)

    def move(self, source: str, destination: str, what: str) -> None:
        """RENAME with OVERWRITE: one step, replacing any file at `destination`, whose
        parents are made first."""
        params = {"destination": destination, "renameoptions": "OVERWRITE"}
        self.mkdirs(parent_of(destination), what)
        try:
            self.requests.call("PUT", source, "RENAME", what, params, idempotent=False)
        except NotFound:
            # The parent just made may have been pruned by a delete of its last file
            # meanwhile: made again, once. A missing source is NotFound again.
            self.mkdirs(parent_of(destination), what)
            self.requests.call("PUT", source, "RENAME", what, params, idempotent=False)

    def publish(self, written: str, destination: str, what: str) -> None:
        """Moves a file written aside over `destination`; deletes it when that fails."""
        try:
            self.move(written, destination, what)
        except ReservoirError:
            self.forget(written, what)
            raise

    def delete(self, path: str, what: str, recursive: bool = False) -> bool:
        """DELETE; False when nothing was there. A directory that is not empty is refused
        (InvalidArgument) unless `recursive`."""
        params = {"recursive": "true"} if recursive else {}
        return bool(self.requests.call("DELETE", path, "DELETE", what, params).get("boolean"))

    def forget(self, path: str, what: str) -> None:
        """Deletes what a failed write left behind, if it can."""
        try:
            self.delete(path, what, recursive=True)
        except ReservoirError as exc:
            log.info("webhdfs_leftover_not_deleted", path=path, error=str(exc))

    def prune(self, directories: set[str], root: str, what: str) -> None:
        """Deletes the directories below `root` left empty by deleted or moved files
        (deepest first), as an object store's "directories" go with their last object.
        HDFS deletes no directory that is not empty without `recursive`: a file written
        meanwhile keeps its directory."""
        below = root.rstrip("/") + "/"
        done: set[str] = set()
        for directory in sorted(directories, key=lambda d: d.count("/"), reverse=True):
            while directory not in done and directory != root and directory.startswith(below):
                done.add(directory)
                try:
                    if not self.delete(directory, what):
                        break
                except ReservoirError:
                    break  # not empty (or refused): nor are the ones above
                directory = parent_of(directory)
