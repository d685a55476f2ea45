"""The worker's huge-page tmpfs: which mount a directory is on, and the setting that asks
for one. (Mounting itself is proven by tests/integration/test_huge_page_tier.py.)"""

from __future__ import annotations

import pytest

from reservoir.common import config
from reservoir.common.errors import InvalidArgument
from reservoir.common.tmpfs_mount import mount_of, parse_mountinfo
from reservoir.worker.server import memory_tier_mount

MOUNTINFO = """\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:25 / /dev/shm rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,size=24683772k
41 30 0:40 / /dev/shm/reservoir-1/worker1 rw,nosuid,nodev - tmpfs tmpfs rw,size=1310720k,huge=within_size
42 30 0:41 / /dev/shm/with\\040space rw - tmpfs tmpfs rw,huge=always
43 41 0:42 / /dev/shm/reservoir-1/worker1 rw - tmpfs tmpfs rw,huge=never
"""


def test_mountinfo_lines_give_mount_point_file_system_and_its_own_options() -> None:
    entries = parse_mountinfo(MOUNTINFO)
    assert [e.mount_point for e in entries][:3] == ["/", "/dev/shm", "/dev/shm/reservoir-1/worker1"]
    assert entries[2].fstype == "tmpfs"
    assert entries[2].options["huge"] == "within_size"
    assert entries[3].mount_point == "/dev/shm/with space"  # octal escapes undone


def test_a_directory_is_on_the_deepest_mount_above_it_and_the_last_one_stacked_there() -> None:
    entries = parse_mountinfo(MOUNTINFO)
    below_shm = mount_of("/dev/shm/reservoir-2/worker1", entries)
    assert below_shm is not None and below_shm.mount_point == "/dev/shm"
    assert not below_shm.huge_pages
    assert mount_of("/dev/shm/with space/b", entries).huge_pages  # type: ignore[union-attr]
    # Two mounts at one point: the one mounted last hides the other.
    stacked = mount_of("/dev/shm/reservoir-1/worker1/blk", entries)
    assert stacked is not None and stacked.options["huge"] == "never"
    assert not stacked.huge_pages
    assert mount_of("/dev/shm/reservoir-10", entries).mount_point == "/dev/shm"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"RESERVOIR_WORKER_SHM_HUGE_PAGES": "yes", "RESERVOIR_WORKER_SHM_DIR": "/x"}, "'yes'"),
        ({"RESERVOIR_WORKER_SHM_HUGE_PAGES": "mount"}, "RESERVOIR_WORKER_SHM_DIR"),
    ],
)
def test_a_huge_page_setting_that_cannot_be_followed_is_refused_by_name(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(InvalidArgument, match=named):
        config.load(config.WorkerConfig, env)


def test_the_worker_mounts_only_when_asked_with_room_beyond_its_capacity() -> None:
    plain = config.load(config.WorkerConfig, {"RESERVOIR_WORKER_SHM_DIR": "/dev/shm/r"})
    assert memory_tier_mount(plain) is None
    asked = config.load(
        config.WorkerConfig,
        {
            "RESERVOIR_WORKER_SHM_DIR": "/dev/shm/r",
            "RESERVOIR_WORKER_SHM_HUGE_PAGES": "mount",
            "RESERVOIR_WORKER_CAPACITY": "4GiB",
        },
    )
    mount = memory_tier_mount(asked)
    assert mount is not None and str(mount.directory) == "/dev/shm/r"
    # A quarter more for blocks landing meanwhile, and the spare files (256 MiB).
    assert mount.size_bytes == (5 << 30) + (256 << 20)
