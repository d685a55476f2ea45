"""Writing through Reservoir (writable mounts): `cp` into Reservoir, `rm`, `mv`, `mkdir`.

`cp LOCAL /path` and `cp - /path` (stdin) upload; the file appears at /path, whole, only
once every byte is in the store. Into a directory (an existing one, or a path ending in
`/`) a file keeps its name; `cp -r DIR /path` uploads a tree. A destination that could
also name a local path is written `reservoir:///path`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from .connection import open_client
from .output import emit, human, note
from .subcommands import Subcommands

if TYPE_CHECKING:
    from reservoir.client import Client

_CHUNK = 16 << 20
_TREE_FILES_AT_ONCE = 8  # files of a tree copied at once (each its parts in parallel too)
STDIN = "-"
SCHEME = "reservoir://"


def reservoir_path(path: str) -> str:
    return "/" + path[len(SCHEME) :].strip("/") if path.startswith(SCHEME) else path


def is_upload(source: str, dest: str, recursive: bool = False) -> bool:
    """`cp SOURCE DEST` copies into Reservoir: from stdin, to a reservoir:// destination,
    or from a local file (with -r, a local directory) to a path that is not a local one
    (its directory does not exist here). Anything else copies out of Reservoir, as `cp`
    always has."""
    if source == STDIN or dest.startswith(SCHEME):
        return True
    local = Path(source)
    if source.startswith(SCHEME) or not (local.is_file() or (recursive and local.is_dir())):
        return False
    return not Path(dest.rstrip("/") or "/").parent.is_dir()


def _into(rs: Client, source: str, dest: str) -> str:
    """Where an upload of `source` to `dest` lands: inside `dest` when it ends in '/' or is
    a directory in Reservoir (keeping the source's name), else `dest` itself."""
    try:
        is_dir = dest.endswith("/") or rs.stat(dest).is_dir
    except (FileNotFoundError, NotADirectoryError):
        is_dir = False
    if not is_dir:
        return dest
    if source == STDIN:
        raise IsADirectoryError(f"{dest}: is a directory (stdin has no name to keep)")
    return dest.rstrip("/") + "/" + Path(source.rstrip("/")).name


def _upload_file(rs: Client, local: Path, dest: str) -> int:
    with local.open("rb") as source_file, rs.open(dest, "wb") as out:
        shutil.copyfileobj(source_file, out, _CHUNK)
    assert out.inode is not None
    return out.inode.size


def _upload_tree(rs: Client, root: Path, dest: str) -> tuple[int, int]:
    """Every file below `root` to the same place below `dest`, a few at once; (files,
    bytes). Directories appear with their first file (no empty marker objects)."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    with ThreadPoolExecutor(_TREE_FILES_AT_ONCE) as pool:
        sizes = list(
            pool.map(
                lambda p: _upload_file(rs, p, f"{dest}/{p.relative_to(root).as_posix()}"), files
            )
        )
    return len(files), sum(sizes)


def cmd_upload(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    with open_client(args) as rs:
        dest = _into(
            rs, args.path, reservoir_path(args.dest) + ("/" if args.dest.endswith("/") else "")
        )
        if args.path == STDIN:
            with rs.open(dest, "wb") as out:
                shutil.copyfileobj(sys.stdin.buffer, out, _CHUNK)
            assert out.inode is not None
            files, size = 1, out.inode.size
        elif Path(args.path).is_dir():
            if not args.recursive:
                raise IsADirectoryError(f"{args.path}: is a directory (cp -r copies a tree)")
            files, size = _upload_tree(rs, Path(args.path), dest)
        else:
            files, size = 1, _upload_file(rs, Path(args.path), dest)
    seconds = time.perf_counter() - start
    data = {
        "path": args.path,
        "dest": dest,
        "files": files,
        "bytes": size,
        "seconds": round(seconds, 3),
    }
    if args.json:
        emit(args, data, str)
    else:
        what = f"{files} files, " if files != 1 else ""
        note(f"wrote {what}{human(size)} ({size} bytes) to {dest} in {seconds:.2f}s")


def cmd_rm(args: argparse.Namespace) -> None:
    path = reservoir_path(args.path)
    with open_client(args) as rs:
        try:
            removed = rs.rm(path, recursive=args.recursive)
        except FileNotFoundError:
            if not args.force:
                raise
            removed = 0  # -f: nothing there is what was asked
    emit(args, {"removed": path, "objects": removed}, lambda: f"removed {path}")


def cmd_mv(args: argparse.Namespace) -> None:
    source, dest = reservoir_path(args.source), reservoir_path(args.dest)
    with open_client(args) as rs:
        inode = rs.rename(source, dest)
    emit(args, {"source": source, "dest": inode.path}, lambda: f"moved {source} to {dest}")


def cmd_mkdir(args: argparse.Namespace) -> None:
    path = reservoir_path(args.path)
    with open_client(args) as rs:
        rs.makedirs(path)
    emit(args, {"made": path}, lambda: f"made {path}")


def register(commands: Subcommands) -> None:
    p = commands.add("rm", "remove a file (or, -r, a directory) on a writable mount", cmd_rm)
    p.add_argument("path", help="the file or directory")
    p.add_argument("-r", "--recursive", action="store_true", help="remove a directory tree")
    p.add_argument(
        "-f", "--force", action="store_true", help="a path that does not exist is no error"
    )
    p = commands.add(
        "mv",
        "move a file or a directory within a writable mount (atomic for readers; a "
        "directory's objects are copied in S3, which has no rename)",
        cmd_mv,
    )
    p.add_argument("source", help="the file or directory to move")
    p.add_argument("dest", help="its new path, in the same mount")
    p = commands.add("mkdir", "make a directory and its parents on a writable mount", cmd_mkdir)
    p.add_argument("path", help="the directory to make")
