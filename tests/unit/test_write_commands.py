"""Which way `reservoir cp` copies: into Reservoir or out of it, from its arguments."""

from __future__ import annotations

from pathlib import Path

from reservoir.cli.write_commands import is_upload


def test_cp_copies_in_from_stdin_or_to_a_reservoir_url_whatever_the_source(tmp_path: Path) -> None:
    assert is_upload("-", "/ckpt/x.pt")
    assert is_upload(str(tmp_path / "missing"), "reservoir:///ckpt/x.pt")


def test_cp_copies_in_a_local_file_to_a_path_that_is_not_a_local_one(tmp_path: Path) -> None:
    local = tmp_path / "model.pt"
    local.write_bytes(b"x")
    assert is_upload(str(local), "/no-such-local-dir-for-reservoir/x.pt")
    # A destination whose directory exists here is a local copy target: cp copies out.
    assert not is_upload(str(local), str(tmp_path / "copy.pt"))


def test_cp_copies_out_when_the_source_is_not_a_local_file(tmp_path: Path) -> None:
    assert not is_upload("/datasets/imagenet/labels.csv", str(tmp_path))
    assert not is_upload("reservoir:///datasets/x", "/no-such-local-dir-for-reservoir/x")
