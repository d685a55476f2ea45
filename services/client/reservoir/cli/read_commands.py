"""Reading files out of Reservoir: `cat` and `cp`."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

from . import write_commands
from .connection import open_client
from .output import emit, human, note
from .subcommands import Subcommands

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


def cmd_cp(args: argparse.Namespace) -> None:
    if write_commands.is_upload(args.path, args.dest):
        write_commands.cmd_upload(args)
        return
    start = time.perf_counter()
    with open_client(args) as rs, rs.open(args.path) as src:
        if args.dest == STDOUT:
            shutil.copyfileobj(src, sys.stdout.buffer, _CHUNK)
            sys.stdout.buffer.flush()
            return
        target = destination(args.path, args.dest)
        size = write_atomically(target, src)
    seconds = time.perf_counter() - start
    data = {"path": args.path, "dest": str(target), "bytes": size, "seconds": round(seconds, 3)}
    if args.json:
        emit(args, data, str)
    else:
        note(f"copied {human(size)} ({size} bytes) to {target} in {seconds:.2f}s")


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
        "dest",
        help="a file, a directory (the file keeps its name), or - for stdout; or the path "
        "in Reservoir (reservoir:///path when it could also name a local path)",
    )
