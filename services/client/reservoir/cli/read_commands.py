"""Reading files out of Reservoir: `cat` and `cp`."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from . import write_commands
from .connection import open_client
from .output import emit, human, note
from .subcommands import Subcommands

if TYPE_CHECKING:
    from reservoir.client import Client

_CHUNK = 4 << 20
STDOUT = "-"


def cmd_cat(args: argparse.Namespace) -> None:
    with open_client(args) as rs, rs.open(args.path) as f:
        shutil.copyfileobj(f, sys.stdout.buffer, _CHUNK)
    sys.stdout.buffer.flush()


def destination(source: str, dest: str) -> Path:
    """Where `cp SOURCE DEST` writes: into DEST when it is a directory (or ends in '/'),
    keeping the source's name, else DEST itself."""
    target = Path(dest)
    if dest.endswith(os.sep) or target.is_dir():
        if not target.is_dir():
            raise FileNotFoundError(f"{dest}: no such directory")
        return target / source.rstrip("/").rsplit("/", 1)[-1]
    if not target.parent.is_dir():
        raise FileNotFoundError(f"{target.parent}: no such directory")
    return target


def write_atomically(target: Path, source: BinaryIO) -> int:
    """Copies `source` to `target` through a temporary file beside it, renamed over
    `target` only once every byte is written: a failed copy leaves no partial file."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(source, out, _CHUNK)
            size = out.tell()
        # mkstemp makes the file 0600; give it the mode a plain `open` would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return size


def _download_tree(rs: Client, root: str, target: Path) -> tuple[int, int]:
    """Every file below `root` in Reservoir to the same place below `target`; (files,
    bytes). Each file is written atomically, as a single `cp` writes one."""
    files = size = 0
    pending = [root.rstrip("/") or "/"]
    while pending:
        directory = pending.pop()
        for entry in rs.iter_ls(directory):
            if entry.is_dir:
                pending.append(entry.path)
                continue
            local = target / entry.path[len(root.rstrip("/")) + 1 :]
            local.parent.mkdir(parents=True, exist_ok=True)
            with rs.open(entry.path) as src:
                size += write_atomically(local, src)
            files += 1
    return files, size


def cmd_cp(args: argparse.Namespace) -> None:
    if write_commands.is_upload(args.path, args.dest, args.recursive):
        write_commands.cmd_upload(args)
        return
    start = time.perf_counter()
    files = 1
    with open_client(args) as rs:
        source = write_commands.reservoir_path(args.path)
        if rs.stat(source).is_dir:
            if not args.recursive:
                raise IsADirectoryError(f"{args.path}: is a directory (cp -r copies a tree)")
            target = Path(args.dest)
            if target.is_dir():  # into it, keeping the name, as cp -r does
                target = target / (source.rstrip("/").rsplit("/", 1)[-1] or "root")
            target.mkdir(parents=True, exist_ok=True)
            files, size = _download_tree(rs, source, target)
        else:
            with rs.open(source) as src:
                if args.dest == STDOUT:
                    shutil.copyfileobj(src, sys.stdout.buffer, _CHUNK)
                    sys.stdout.buffer.flush()
                    return
                target = destination(source, args.dest)
                size = write_atomically(target, src)
    seconds = time.perf_counter() - start
    data = {
        "path": args.path,
        "dest": str(target),
        "files": files,
        "bytes": size,
        "seconds": round(seconds, 3),
    }
    if args.json:
        emit(args, data, str)
    else:
        what = f"{files} files, " if files != 1 else ""
        note(f"copied {what}{human(size)} ({size} bytes) to {target} in {seconds:.2f}s")


def register(commands: Subcommands) -> None:
    p = commands.add("cat", "write a file to stdout", cmd_cat)
    p.add_argument("path", help="the file")
    p = commands.add(
        "cp",
        "copy a file out of Reservoir (to a file, into a directory, or to stdout with -), "
        "or into it (from a local file or - for stdin, to a writable mount); a failed copy "
        "leaves no partial file",
        cmd_cp,
    )
    p.add_argument("path", help="the file in Reservoir, or a local file or - to copy in")
    p.add_argument(
        "-r", "--recursive", action="store_true", help="copy a directory tree (either way)"
    )
    p.add_argument(
        "dest",
        help="a file, a directory (the file keeps its name), or - for stdout; or the path "
        "in Reservoir (reservoir:///path when it could also name a local path)",
    )
