"""Writing through Reservoir (writable mounts): `cp` into Reservoir, `rm`, `mv`, `mkdir`.

`cp LOCAL /path` and `cp - /path` (stdin) upload; the file appears at /path, whole, only
once every byte is in the store. A destination that could also name a local path is
written `reservoir:///path`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from reservoir.common.errors import InvalidArgument

from .connection import open_client
from .output import emit, human, note
from .subcommands import Subcommands

_CHUNK = 16 << 20
STDIN = "-"
SCHEME = "reservoir://"


def _reservoir_path(path: str) -> str:
    return "/" + path[len(SCHEME) :].strip("/") if path.startswith(SCHEME) else path


def is_upload(source: str, dest: str) -> bool:
    """`cp SOURCE DEST` copies into Reservoir: from stdin, to a reservoir:// destination,
    or from a local file to a path that is not a local one (its directory does not exist
    here). Anything else copies out of Reservoir, as `cp` always has."""
    if source == STDIN or dest.startswith(SCHEME):
        return True
    if source.startswith(SCHEME) or not Path(source).is_file():
        return False
    return not Path(dest).parent.is_dir()


def cmd_upload(args: argparse.Namespace) -> None:
    dest = _reservoir_path(args.dest)
    start = time.perf_counter()
    with open_client(args) as rs:
        if args.path == STDIN:
            source = sys.stdin.buffer
            with rs.open(dest, "wb") as out:
                shutil.copyfileobj(source, out, _CHUNK)
        else:
            if Path(args.path).is_dir():
                raise InvalidArgument(f"{args.path}: is a directory (copy files one by one)")
            with open(args.path, "rb") as source_file, rs.open(dest, "wb") as out:
                shutil.copyfileobj(source_file, out, _CHUNK)
        inode = out.inode
    assert inode is not None
    seconds = time.perf_counter() - start
    data = {"path": args.path, "dest": dest, "bytes": inode.size, "seconds": round(seconds, 3)}
    if args.json:
        emit(args, data, str)
    else:
        note(f"wrote {human(inode.size)} ({inode.size} bytes) to {dest} in {seconds:.2f}s")


def cmd_rm(args: argparse.Namespace) -> None:
    path = _reservoir_path(args.path)
    with open_client(args) as rs:
        removed = rs.rm(path, recursive=args.recursive)
    emit(args, {"removed": path, "objects": removed}, lambda: f"removed {path}")


def cmd_mv(args: argparse.Namespace) -> None:
    source, dest = _reservoir_path(args.source), _reservoir_path(args.dest)
    with open_client(args) as rs:
        inode = rs.rename(source, dest)
    emit(args, {"source": source, "dest": inode.path}, lambda: f"moved {source} to {dest}")


def cmd_mkdir(args: argparse.Namespace) -> None:
    path = _reservoir_path(args.path)
    with open_client(args) as rs:
        rs.makedirs(path)
    emit(args, {"made": path}, lambda: f"made {path}")


def register(commands: Subcommands) -> None:
    p = commands.add("rm", "remove a file (or, -r, a directory) on a writable mount", cmd_rm)
    p.add_argument("path", help="the file or directory")
    p.add_argument("-r", "--recursive", action="store_true", help="remove a directory tree")
    p = commands.add("mv", "move a file within a writable mount (atomic for readers)", cmd_mv)
    p.add_argument("source", help="the file to move")
    p.add_argument("dest", help="its new path, in the same mount")
    p = commands.add("mkdir", "make a directory and its parents on a writable mount", cmd_mkdir)
    p.add_argument("path", help="the directory to make")
