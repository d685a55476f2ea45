"""The workers' shared-memory settings a bench can vary: huge pages and spare block files
(README "Capacity"), as flags, and the environment that gives them to the workers."""

from __future__ import annotations

import argparse


def add_shm_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shm-huge-pages",
        choices=["off", "mount"],
        default="off",
        help="the workers' RESERVOIR_WORKER_SHM_HUGE_PAGES (mount needs CAP_SYS_ADMIN)",
    )
    p.add_argument(
        "--shm-preallocate",
        choices=["on", "off"],
        default="on",
        help="the workers' RESERVOIR_WORKER_SHM_PREALLOCATE: spare block files made at start",
    )


def shm_env(args: argparse.Namespace) -> dict[str, str]:
    return {
        "RESERVOIR_WORKER_SHM_HUGE_PAGES": args.shm_huge_pages,
        "RESERVOIR_WORKER_SHM_PREALLOCATE": args.shm_preallocate,
    }
