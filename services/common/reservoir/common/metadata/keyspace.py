"""Where each table lives in the metadata store. One place, so layouts never drift."""

from __future__ import annotations

import hashlib

ROOT = b"/reservoir/v1/"
MOUNTS = ROOT + b"mounts"
# The namespace: chunks of a directory's inodes (common/metadata/inode_codec.py), keyed by mount,
# directory and the last name in the chunk (see namespace_group).
NAMESPACE = ROOT + b"ns/"
# Before chunks: one JSON inode per key, by depth then path. Read only to migrate it.
LEGACY_INODES = ROOT + b"inodes/"
WORKERS = ROOT + b"workers/"
# An operator's mark on a worker (draining, drained), written by the leader and kept apart
# from the record the worker writes under its lease, so a worker that re-registers keeps it.
WORKER_MARKS = ROOT + b"worker-marks/"
LOCATIONS = ROOT + b"locations/"
# Declared datasets: each one's spec record, and apart from it the status the leader writes
# (a status write never races an apply of the spec).
DATASETS = ROOT + b"datasets/"
DATASET_STATUS = ROOT + b"dataset-status/"
JOBS = ROOT + b"jobs/"
# Cache rules (pins, TTLs) and the files each pin holds: one prefix, so a worker follows
# both with one watch.
CACHE = ROOT + b"cache/"
CACHE_RULES = CACHE + b"rules"
PINNED = CACHE + b"pinned"
# Master leadership (master/leadership.py): the leader key, bound to the leader's lease;
# the last term taken; each master's own record, bound to its lease.
MASTERS = ROOT + b"masters/"
MASTER_LEADER = MASTERS + b"leader"
MASTER_TERM = MASTERS + b"term"
MASTER_MEMBERS = MASTERS + b"members/"
# When each worker last served each mount with an idle TTL (ms), one key per (mount,
# worker): any worker reads a mount's keys to tell whether the cluster still reads it.
MOUNT_READS = ROOT + b"mount-reads/"


def mount_reads_prefix(mount_path: str) -> bytes:
    return MOUNT_READS + mount_path.encode() + b"\x00"


def mount_read_key(mount_path: str, worker_id: str) -> bytes:
    return mount_reads_prefix(mount_path) + worker_id.encode()


# What the leader's last interval sync of each mount found (master/interval_sync.py).
MOUNT_SYNC = ROOT + b"mount-sync"


def mount_sync_key(path: str) -> bytes:
    return MOUNT_SYNC + path.encode()


def mount_key(path: str) -> bytes:
    return MOUNTS + path.encode()


def _digest(path: str) -> bytes:
    return hashlib.blake2b(path.encode(), digest_size=8).hexdigest().encode()


# Hex of an 8-byte digest and the '/' after it: a namespace key's parts have fixed widths.
_DIGEST_PART = 17


def namespace_mount_prefix(mount_path: str) -> bytes:
    """Every chunk of a mount's namespace: dropped as one range when the mount goes."""
    return NAMESPACE + _digest(mount_path) + b"/"


# A directory's children are one contiguous range whose key names the directory by a
# 64-bit hash of its path: a stat computes its chunk's place from the path alone (one
# read), listing a directory reads its children only, and a key stays short however deep
# the path. Two directories of a mount share a range only on a hash collision (odds of
# about 3 in 10^6 at ten million directories, 3 in 10^8 at a million).
def namespace_group(mount_path: str, directory: str) -> bytes:
    return namespace_mount_prefix(mount_path) + _digest(directory) + b"/"


def namespace_group_of(key: bytes) -> bytes:
    """The group (see namespace_group) a namespace chunk's key lies in."""
    return key[: len(NAMESPACE) + 2 * _DIGEST_PART]


def namespace_mount_of(key: bytes) -> bytes:
    """The mount prefix (see namespace_mount_prefix) a namespace key lies under."""
    return key[: len(NAMESPACE) + _DIGEST_PART]


# A chunk's key is its group plus the last name it may hold; the group's last chunk
# holds every name after the others', under a byte no UTF-8 name contains.
LAST_CHUNK = b"\xff"


def chunk_key(group: bytes, last_name: str | None) -> bytes:
    return group + (LAST_CHUNK if last_name is None else last_name.encode())


def legacy_inode_key(path: str) -> bytes:
    """Where the JSON layout kept `path` (by depth, then path)."""
    depth = 0 if path == "/" else path.count("/")
    return LEGACY_INODES + f"{depth:03d}".encode() + path.encode()


def worker_key(worker_id: str) -> bytes:
    return WORKERS + worker_id.encode()


def worker_mark_key(worker_id: str) -> bytes:
    return WORKER_MARKS + worker_id.encode()


def locations_prefix(worker_id: str) -> bytes:
    return LOCATIONS + worker_id.encode() + b"/"


def location_key(worker_id: str, file_id: str) -> bytes:
    return locations_prefix(worker_id) + file_id.encode()


def cache_rule_key(path: str) -> bytes:
    return CACHE_RULES + path.encode()


# A normalised path never holds "//", so one rule's pinned files never share a prefix
# with another's (`/a//` is not a prefix of `/a/b//…`).
def pinned_prefix(rule_path: str) -> bytes:
    return PINNED + rule_path.encode() + b"//"


def pinned_key(rule_path: str, file_id: str) -> bytes:
    return pinned_prefix(rule_path) + file_id.encode()


def pinned_file_id(key: bytes) -> str:
    """The file id at the end of a `pinned_key`."""
    return key.rsplit(b"//", 1)[1].decode()


def pinned_rule_path(key: bytes) -> str:
    return key[len(PINNED) :].rsplit(b"//", 1)[0].decode()
