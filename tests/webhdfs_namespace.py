"""HDFS's file system semantics over a local directory, for the WebHDFS test server
(`webhdfs_server.py` speaks the protocol): paths ("/a/b") as files below the served root,
FileStatus JSON, and the refusals HDFS makes, as the RemoteException it answers with."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

Status = dict[str, Any]


class RemoteError(Exception):
    """What HDFS answers as a RemoteException: the exception's name, and its status."""

    def __init__(self, status: int, exception: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.exception = exception

    def body(self) -> dict[str, Any]:
        java = {
            "FileNotFoundException": "java.io.FileNotFoundException",
            "IllegalArgumentException": "java.lang.IllegalArgumentException",
            "SecurityException": "java.lang.SecurityException",
        }.get(self.exception, f"org.apache.hadoop.fs.{self.exception}")
        remote = {"exception": self.exception, "javaClassName": java, "message": str(self)}
        return {"RemoteException": remote}


def not_found(path: str) -> RemoteError:
    return RemoteError(404, "FileNotFoundException", f"File does not exist: {path}")


def _invalid(message: str) -> RemoteError:
    return RemoteError(400, "HadoopIllegalArgumentException", message)


class Namespace:
    def __init__(self, root: Path) -> None:
        self.root = root

    def local(self, path: str) -> Path:
        names = [n for n in path.split("/") if n]
        if any(n in (".", "..") for n in names):
            raise RemoteError(400, "IllegalArgumentException", f"Invalid path name {path}")
        return self.root.joinpath(*names)

    # ---- reads ---------------------------------------------------------------------------

    def status(self, path: str) -> Status:
        local = self.local(path)
        if not local.exists():
            raise not_found(path)
        return _status(local, "")

    def entries(self, path: str) -> list[Status]:
        """LISTSTATUS: a directory's entries in name order (a file: its own status)."""
        local = self.local(path)
        if not local.exists():
            raise not_found(path)
        if not local.is_dir():
            return [_status(local, "")]
        names = sorted(os.listdir(local), key=lambda n: n.encode())
        return [_status(local / n, n) for n in names]

    def batch(self, path: str, after: str, size: int) -> tuple[list[Status], int]:
        """LISTSTATUS_BATCH: at most `size` entries after `after`, and how many remain."""
        entries = self.entries(path)
        if after:
            entries = [e for e in entries if e["pathSuffix"].encode() > after.encode()]
        return entries[:size], max(0, len(entries) - size)

    def file(self, path: str) -> Path:
        """The file an OPEN or APPEND reads or extends."""
        local = self.local(path)
        if not local.exists():
            raise not_found(path)
        if not local.is_file():
            raise RemoteError(404, "FileNotFoundException", f"Path is not a file: {path}")
        return local

    # ---- writes --------------------------------------------------------------------------

    def creatable(self, path: str, overwrite: bool) -> Path:
        """The file a CREATE may write (checked at the namenode and at the datanode)."""
        local = self.local(path)
        self._parents_are_directories(local)
        if local.is_dir():
            raise RemoteError(
                403, "FileAlreadyExistsException", f"{path} already exists as a directory"
            )
        if local.exists() and not overwrite:
            raise RemoteError(403, "FileAlreadyExistsException", f"{path} already exists")
        return local

    def mkdirs(self, path: str) -> None:
        local = self.local(path)
        self._parents_are_directories(local)
        if local.exists() and not local.is_dir():
            raise RemoteError(403, "FileAlreadyExistsException", f"Path is not a directory: {path}")
        local.mkdir(parents=True, exist_ok=True)

    def rename(self, path: str, destination: str) -> bool:
        """rename(): False rather than an exception; into a directory that exists."""
        local, target = self.local(path), self._destination(destination)
        if target.is_dir():
            target = target / local.name
        if not local.exists() or target.exists() or not target.parent.is_dir():
            return False
        os.rename(local, target)
        return True

    def rename2(self, path: str, destination: str, overwrite: bool) -> None:
        """rename with options (renameoptions): an exception for every refusal."""
        local, target = self.local(path), self._destination(destination)
        if not local.exists():
            raise RemoteError(404, "FileNotFoundException", f"rename source {path} is not found.")
        if not target.parent.is_dir():
            raise RemoteError(
                404, "FileNotFoundException", f"rename destination parent {destination} not found."
            )
        if target.exists():
            if not overwrite:
                raise RemoteError(
                    403,
                    "FileAlreadyExistsException",
                    f"rename destination {destination} already exists.",
                )
            if target.is_dir() != local.is_dir():
                raise RemoteError(
                    403,
                    "IOException",
                    f"Source {path} and destination {destination} must both be directories or files",
                )
            if target.is_dir() and os.listdir(target):
                raise RemoteError(
                    403, "IOException", f"rename destination directory is not empty: {destination}"
                )
        os.replace(local, target)

    def concat(self, path: str, sources: list[str]) -> None:
        """The sources appended to the target, then gone; HDFS's conditions: files of the
        target's directory, none empty, none repeated, not the target."""
        if not sources:
            raise _invalid("No sources given")
        target = self.file(path)
        seen: set[Path] = set()
        for source in sources:
            src = self.local(source)
            if not src.is_file():
                raise not_found(source)
            if src == target or src in seen:
                raise _invalid(f"concat: the source file {source} is the target or repeated")
            if src.parent != target.parent:
                raise _invalid(
                    f"concat: source file {source} and target file {path} should be in the "
                    "same directory"
                )
            if src.stat().st_size == 0:
                raise _invalid(
                    f"concat: source file {source} is invalid or empty or underConstruction"
                )
            seen.add(src)
        with target.open("ab") as out:
            for source in sources:
                with self.local(source).open("rb") as f:
                    shutil.copyfileobj(f, out)
        for source in sources:
            self.local(source).unlink()

    def delete(self, path: str, recursive: bool) -> bool:
        local = self.local(path)
        if local == self.root or not local.exists():
            return False
        if local.is_dir():
            if os.listdir(local) and not recursive:
                raise RemoteError(403, "PathIsNotEmptyDirectoryException", f"{path} is non empty")
            shutil.rmtree(local)
        else:
            local.unlink()
        return True

    def _destination(self, destination: str) -> Path:
        if not destination.startswith("/"):
            raise RemoteError(400, "IllegalArgumentException", "Invalid destination")
        return self.local(destination)

    def _parents_are_directories(self, local: Path) -> None:
        for parent in reversed(local.parents):
            if parent == self.root or self.root not in parent.parents:
                continue
            if parent.exists() and not parent.is_dir():
                raise RemoteError(
                    403, "ParentNotDirectoryException", f"{parent} (is not a directory)"
                )


def _status(local: Path, suffix: str) -> Status:
    st = local.stat()
    directory = local.is_dir()
    return {
        "accessTime": 0 if directory else st.st_atime_ns // 1_000_000,
        "blockSize": 0 if directory else 134217728,
        "childrenNum": len(os.listdir(local)) if directory else 0,
        "fileId": st.st_ino,
        "group": "supergroup",
        "length": 0 if directory else st.st_size,
        "modificationTime": st.st_mtime_ns // 1_000_000,
        "owner": "webuser",
        "pathSuffix": suffix,
        "permission": "755" if directory else "644",
        "replication": 0 if directory else 1,
        "storagePolicy": 0,
        "type": "DIRECTORY" if directory else "FILE",
    }
