"""Where each table lives in the metadata store. One place, so layouts never drift."""

from __future__ import annotations

ROOT = b"/reservoir/v1/"
MOUNTS = ROOT + b"mounts"
INODES = ROOT + b"inodes"
WORKERS = ROOT + b"workers/"
LOCATIONS = ROOT + b"locations/"
JOBS = ROOT + b"jobs/"


def mount_key(path: str) -> bytes:
    return MOUNTS + path.encode()


def inode_key(path: str) -> bytes:
    return INODES + path.encode()


def worker_key(worker_id: str) -> bytes:
    return WORKERS + worker_id.encode()


def locations_prefix(worker_id: str) -> bytes:
    return LOCATIONS + worker_id.encode() + b"/"


def location_key(worker_id: str, file_id: str) -> bytes:
    return locations_prefix(worker_id) + file_id.encode()
