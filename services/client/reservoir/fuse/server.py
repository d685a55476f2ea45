"""The serving process: one `Client`, the FUSE operations, libfuse's multithreaded loop.

    python -m reservoir.fuse.server MOUNTPOINT --path /datasets --state-dir DIR [--master ADDR]

Started by the supervisor (`supervisor.Supervisor`), in a fresh interpreter each time, and
serves until the mount goes away (unmounted, or SIGTERM/SIGINT: libfuse unmounts then).
Exits with `EXIT_SETUP` when it cannot work at all (no mfusepy or libfuse 3, or with
`--check` a path that is not a directory of the cluster), which the supervisor does not
retry.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.errors import NotADirectory, ReservoirError

from .libfuse import SetupError, load_mfusepy
from .mount_spec import MountSpec
from .mountpoint import SUBTYPE

log = logs.get_logger(__name__)

EXIT_SETUP = 78  # EX_CONFIG


def client_config(spec: MountSpec) -> cfg.ClientConfig:
    """The client settings from the environment, the master found as every client finds
    it (`--master`, then $RESERVOIR_MASTER, then the local cluster of `--state-dir`)."""
    from reservoir.client.discovery import client_config as discovered

    return discovered(
        spec.master or None, state_dir=Path(spec.state_dir) if spec.state_dir else None
    )


def serve(spec: MountSpec, config: cfg.FuseConfig, *, check: bool) -> int:
    mfusepy = load_mfusepy()
    from reservoir.client import Client

    from .filesystem import ReservoirFS

    client = Client(config=client_config(spec))
    try:
        if check:
            inode = client.stat(spec.path)
            if not inode.is_dir:
                raise NotADirectory(f"{spec.path}: not a directory")
        filesystem = ReservoirFS(client, spec.path, config, writable=spec.writable)
        log.info(
            "fuse_serving",
            mountpoint=spec.mountpoint,
            path=spec.path,
            master=client.config.master,
            pid=os.getpid(),
        )
        try:
            mfusepy.FUSE(
                filesystem,
                spec.mountpoint,
                raw_fi=True,
                foreground=True,
                ro=not spec.writable,
                default_permissions=True,
                allow_other=spec.allow_other,
                fsname="reservoir:" + spec.path.replace(",", "_"),
                subtype=SUBTYPE,
                auto_cache=True,
                entry_timeout=config.attr_timeout_s,
                attr_timeout=config.attr_timeout_s,
                negative_timeout=config.negative_timeout_s,
                max_read=config.max_read_bytes,
                max_threads=config.threads,
                max_idle_threads=config.threads,
            )
        except RuntimeError as exc:
            # libfuse said why on stderr; after a signal (SIGTERM) it has unmounted.
            if not filesystem.started:
                log.error("fuse_mount_failed", mountpoint=spec.mountpoint, status=str(exc))
                return 1
        log.info("fuse_unmounted", mountpoint=spec.mountpoint, pid=os.getpid())
        return 0
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reservoir.fuse.server")
    MountSpec.add_arguments(parser)
    parser.add_argument(
        "--check", action="store_true", help="refuse to mount unless --path is a directory"
    )
    args = parser.parse_args(argv)
    logs.configure_output(cfg.load(cfg.LogConfig))
    try:
        return serve(MountSpec.from_args(args), cfg.load(cfg.FuseConfig), check=args.check)
    except (SetupError, ReservoirError, ValueError) as exc:
        print(f"reservoir fuse: {exc}", file=sys.stderr)
        return EXIT_SETUP


if __name__ == "__main__":
    sys.exit(main())
