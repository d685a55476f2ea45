"""Where each table lives in the metadata store. One place, so layouts never drift."""

from __future__ import annotations

ROOT = b"/reservoir/v1/"
MOUNTS = ROOT + b"mounts"
INODES = ROOT + b"inodes"
WORKERS = ROOT + b"workers/"
LOCATIONS = ROOT + b"locations/"
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


def mount_key(path: str) -> bytes:
    return MOUNTS + path.encode()


# Inodes are keyed by depth, then path: a directory's children are one contiguous range,
# so listing a directory reads its children only, never the whole subtree below it.
MAX_DEPTH = 256


def depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def inode_key(path: str) -> bytes:
    return INODES + f"/{depth(path):03d}".encode() + path.encode()


def inode_level_prefix(directory: str, level: int) -> bytes:
    """Keys of the inodes `level` components deep that lie below `directory`."""
    return INODES + f"/{level:03d}".encode() + (directory.rstrip("/") + "/").encode()


def inode_children_prefix(directory: str) -> bytes:
    return inode_level_prefix(directory, depth(directory) + 1)


def worker_key(worker_id: str) -> bytes:
    return WORKERS + worker_id.encode()


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
