"""Mount points as the kernel's mount table shows them, and what a supervisor passes on."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from reservoir.fuse.mount_spec import MountSpec
from reservoir.fuse.mountpoint import MountPoint, MountState, _unescape


def test_a_plain_directory_is_no_mount_point(tmp_path: Path) -> None:
    mount = MountPoint(tmp_path, timeout_s=5)
    assert mount.fstype() is None
    assert mount.state() is MountState.ABSENT


def test_the_root_file_system_is_a_live_mount() -> None:
    mount = MountPoint("/", timeout_s=5)
    assert mount.fstype()
    assert mount.state() is MountState.LIVE


def test_mount_table_paths_with_spaces_and_tabs_are_unescaped() -> None:
    assert _unescape(r"/mnt/my\040data\011set\134x") == "/mnt/my data\tset\\x"


@pytest.mark.skipif(shutil.which("fusermount3") is None, reason="fusermount3 is missing")
def test_unmounting_what_is_not_mounted_fails_saying_why(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="cannot unmount"):
        MountPoint(tmp_path, timeout_s=5).unmount(lazy=False)


def test_a_mount_spec_survives_the_trip_through_a_command_line() -> None:
    spec = MountSpec("/mnt/r", "/datasets/x/", "10.0.0.5:19998", "/home/u/.reservoir", True)
    assert spec.path == "/datasets/x"
    parser = argparse.ArgumentParser()
    MountSpec.add_arguments(parser)
    assert MountSpec.from_args(parser.parse_args(spec.to_args())) == spec
    found = MountSpec("/mnt/r", "/", "", "/s")
    assert MountSpec.from_args(parser.parse_args(found.to_args())) == found
