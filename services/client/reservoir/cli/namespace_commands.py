"""Mounts and the namespace: `mount`, `unmount`, `mounts`, `ls`, `stat`."""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from reservoir.common.config import parse_duration, parse_size
from reservoir.common.models import NORMAL, PRIORITIES, Inode, Mount
from reservoir.common.understore.store_schemes import registered

from .connection import open_client
from .output import Table, emit, fields, human, iso_time, print_json_array, time_fields
from .subcommands import Subcommands

if TYPE_CHECKING:
    from reservoir.client import Client


def inode_dict(inode: Inode) -> dict[str, Any]:
    return {
        "path": inode.path,
        "type": "directory" if inode.is_dir else "file",
        "size": inode.size,
        **time_fields("mtime", inode.mtime_ms),
        "etag": inode.etag,
        "block_size": inode.block_size,
        "file_id": inode.file_id,
        "ufs_uri": inode.ufs_uri,
        "locations": {str(k): v for k, v in sorted(inode.locations.items())},
    }


def mount_dict(m: Mount) -> dict[str, Any]:
    return {
        "path": m.path,
        "uri": m.uri,
        "endpoint_url": m.options.endpoint_url,
        "region": m.options.region,
        "block_size": m.options.block_size,
        "credentials": m.options.credentials,
        "metadata_sync": m.options.metadata_sync,
        "writable": m.options.writable,
        "events_queue_url": m.options.events_queue_url,
        "dataset": m.options.dataset or None,
        "quota_bytes": m.options.quota_bytes,
        "priority": m.options.priority or NORMAL,
        "idle_ttl_ms": m.options.idle_ttl_ms,
        "max_requests_per_s": m.options.max_requests_per_s,
        "max_bytes_per_s": m.options.max_bytes_per_s,
        "max_in_flight": m.options.max_in_flight,
        **time_fields("created", m.created_ms),
    }


def _name(inode: Inode) -> str:
    return inode.path.rsplit("/", 1)[-1] + ("/" if inode.is_dir else "")


def cmd_mount(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        mount = rs.mount(
            args.path,
            args.uri,
            endpoint_url=args.endpoint_url or "",
            region=args.region or "",
            block_size=args.block_size or 0,
            credentials=args.credentials or "",
            metadata_sync=args.metadata_sync or "",
            replace=args.replace,
            writable=args.writable,
            events_queue_url=args.events_queue or "",
            quota_bytes=args.quota or 0,
            priority=args.priority or "",
            idle_ttl_ms=int(parse_duration(args.idle_ttl) * 1000) if args.idle_ttl else 0,
            max_requests_per_s=args.max_requests_per_second or 0,
            max_bytes_per_s=args.max_bytes_per_second or 0,
            max_in_flight=args.max_in_flight or 0,
        )
    emit(args, mount_dict(mount), lambda: f"mounted {mount.uri} at {mount.path}")


def cmd_unmount(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        rs.unmount(args.path)
    emit(args, {"unmounted": args.path}, lambda: f"unmounted {args.path}")


def cmd_mounts(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        mounts = rs.mounts()

    def text() -> str:
        table = Table(
            "PATH",
            "URI",
            "ENDPOINT",
            "BLOCK SIZE",
            "CREDENTIALS",
            "METADATA SYNC",
            "ACCESS",
            "DATASET",
            "MOUNTED",
        )
        for m in mounts:
            o = m.options
            table.row(
                m.path,
                m.uri,
                o.endpoint_url,
                human(o.block_size) if o.block_size else "default",
                o.credentials or "env",
                o.metadata_sync or "default",
                "rw" if o.writable else "ro",
                o.dataset or "-",
                iso_time(m.created_ms),
            )
        return table.render(empty="(no mounts)")

    emit(args, [mount_dict(m) for m in mounts], text)


def cmd_ls(args: argparse.Namespace) -> None:
    """Prints each page of the listing as it arrives (as `kubectl get --chunk-size`): the
    first lines show after one master call, and nothing holds the whole directory. A
    failure between pages leaves what was printed and exits 1."""
    with open_client(args) as rs:
        page = rs.config.list_page_size
        entries = _listing(rs, args.path, page)
        if args.json:
            print_json_array((inode_dict(e) for e in entries), flush_every=page)
            return

        def name(e: Inode) -> str:
            # A file listed by its own path is shown by that path, as `ls FILE` does.
            return args.path if e.path == args.path and not e.is_dir else _name(e)

        for number, chunk in enumerate(_chunks(entries, page)):
            if not args.long:
                print("\n".join(name(e) for e in chunk), flush=True)
                continue
            # Fixed widths but for the name: every page's rows line up under one header.
            table = Table("TYPE", "SIZE", "MODIFIED", "NAME", numeric=("SIZE",), widths=_LONG)
            for e in chunk:
                size = "-" if e.is_dir else human(e.size)
                table.row("dir" if e.is_dir else "file", size, iso_time(e.mtime_ms), name(e))
            print(table.render(header=number == 0), flush=True)


def _listing(rs: Client, path: str, page: int) -> Iterator[Inode]:
    """A directory's entries; for a file, the file itself (as `ls FILE` lists it)."""
    entries = rs.iter_ls(path, page_size=page)
    try:
        first = next(entries)
    except StopIteration:
        return
    except NotADirectoryError:
        yield rs.stat(path)
        return
    yield first
    yield from entries


# TYPE ("file"), SIZE (up to "1023.9KiB"), MODIFIED (ISO 8601 with its UTC offset).
_LONG = (4, 9, len("2000-01-01T00:00:00+00:00"))


def _chunks(entries: Iterator[Inode], size: int) -> Iterator[list[Inode]]:
    """Runs of `size` entries: iter_ls fetches a page as the one before runs out, so each
    run is one page."""
    while chunk := list(itertools.islice(entries, size)):
        yield chunk


def cmd_stat(args: argparse.Namespace) -> None:
    with open_client(args) as rs:
        inode = rs.stat(args.path, with_locations=True)

    def text() -> str:
        if inode.is_dir:
            return fields([("path", inode.path), ("type", "directory")])
        lines = fields(
            [
                ("path", inode.path),
                ("type", "file"),
                ("size", f"{human(inode.size)} ({inode.size} bytes)"),
                ("modified", iso_time(inode.mtime_ms)),
                ("etag", inode.etag),
                ("block size", human(inode.block_size)),
                ("blocks", inode.block_count),
                ("file id", inode.file_id),
                ("under-store", inode.ufs_uri),
            ]
        )
        table = Table("BLOCK", "CACHED ON", numeric=("BLOCK",))
        for index in range(inode.block_count):
            table.row(index, ", ".join(inode.locations.get(index, [])) or "(not cached)")
        return f"{lines}\n\n{table.render()}" if inode.block_count else lines

    emit(args, inode_dict(inode), text)


def register(commands: Subcommands) -> None:
    p = commands.add("mount", "mount an under-store URI at a Reservoir path", cmd_mount)
    p.add_argument("path", help="the Reservoir path, e.g. /datasets/imagenet")
    p.add_argument(
        "uri",
        help="the store: "
        + ", ".join(s.example for s in registered())
        + " (http(s): read-only, anonymous, cannot be listed; webhdfs/hdfs: the namenode's "
        "HTTP port); the cluster accepts the schemes in RESERVOIR_ALLOWED_SCHEMES",
    )
    p.add_argument(
        "--endpoint-url",
        metavar="URL",
        help="the store's endpoint: an emulator or a private endpoint (Azure: "
        "http://HOST:PORT/ACCOUNT; default: the cloud's own)",
    )
    p.add_argument("--region", help="the S3 region (default: the credentials' region)")
    p.add_argument(
        "--block-size",
        type=parse_size,
        metavar="SIZE",
        help="cache block size, e.g. 4MiB (default: the master's RESERVOIR_BLOCK_SIZE)",
    )
    p.add_argument(
        "--credentials",
        metavar="SOURCE",
        help="env (default: the servers' environment: the AWS chain for s3, "
        "GOOGLE_APPLICATION_CREDENTIALS for gs, AZURE_STORAGE_ACCOUNT_NAME and "
        "AZURE_STORAGE_ACCOUNT_KEY for az, HADOOP_USER_NAME for webhdfs), anonymous, or "
        "file:/path (a credentials file; webhdfs: the HDFS user on its first line)",
    )
    p.add_argument(
        "--metadata-sync",
        metavar="POLICY",
        help="how long listings are trusted before S3 is asked again: never, always, or "
        "interval:<duration> (default: the master's RESERVOIR_METADATA_TTL, 5m)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace the mount already at PATH (new URI, endpoint, credentials, block size)",
    )
    p.add_argument(
        "--writable",
        action="store_true",
        help="files may be written, moved and removed through Reservoir (checkpoints); "
        "s3://, file:// and webhdfs:// (hdfs://) mounts. Default: read-only",
    )
    p.add_argument(
        "--events-queue",
        metavar="URL",
        help="an SQS queue receiving the bucket's S3 event notifications (ObjectCreated, "
        "ObjectRemoved): changes show up in seconds; read with the mount's credentials",
    )
    p.add_argument(
        "--quota",
        type=parse_size,
        metavar="SIZE",
        help="the most bytes of this mount the whole cluster caches, e.g. 200GiB (default: no cap)",
    )
    p.add_argument(
        "--priority",
        choices=list(PRIORITIES),
        help="whose blocks a full worker evicts first: low, then normal, then high "
        "(default: normal)",
    )
    p.add_argument(
        "--idle-ttl",
        metavar="DURATION",
        help="drop the mount's cached blocks once it was not read for this long, e.g. 72h "
        "(default: never)",
    )
    p.add_argument(
        "--max-requests-per-second",
        type=int,
        metavar="N",
        help="GETs per second all workers together send to the under-store (default: no limit)",
    )
    p.add_argument(
        "--max-bytes-per-second",
        type=parse_size,
        metavar="SIZE",
        help="bytes per second all workers together read from the under-store, e.g. 2GiB",
    )
    p.add_argument(
        "--max-in-flight",
        type=int,
        metavar="N",
        help="GETs all workers together have outstanding at the under-store at once",
    )
    p = commands.add("unmount", "remove a mount (the under-store is not touched)", cmd_unmount)
    p.add_argument("path", help="the mount's path")
    commands.add("mounts", "list mounts", cmd_mounts)
    p = commands.add("ls", "list a directory, or show one file", cmd_ls, short_help=False)
    p.add_argument("path", nargs="?", default="/", help="the directory or file (default /)")
    p.add_argument(
        "-l", "--long", action="store_true", help="a table: type, size, modification time"
    )
    p.add_argument(
        "-h",
        "--human-readable",
        action="store_true",
        help="sizes in KiB, MiB, GiB: what the table shows anyway, taken so that `ls -lh` "
        "works as typed (--help is the help)",
    )
    p = commands.add("stat", "a file's info, with the workers caching each block", cmd_stat)
    p.add_argument("path", help="the file or directory")
