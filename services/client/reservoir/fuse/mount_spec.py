"""What one `reservoir fuse` mounts, handed from the command to the supervisor and from
the supervisor to each serving process as command-line arguments."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from reservoir.common import paths


@dataclass(frozen=True)
class MountSpec:
    mountpoint: str  # the resolved directory
    path: str  # the Reservoir directory shown there
    master: str  # "" : found as the client finds it ($RESERVOIR_MASTER, the local cluster)
    state_dir: str  # the local cluster's state directory, for finding the master
    allow_other: bool = False
    writable: bool = False  # files may be written (below writable mounts of the cluster)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", paths.normalize(self.path))

    def to_args(self) -> list[str]:
        args = [self.mountpoint, "--path", self.path, "--state-dir", self.state_dir]
        if self.master:
            args += ["--master", self.master]
        if self.allow_other:
            args.append("--allow-other")
        if self.writable:
            args.append("--writable")
        return args

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("mountpoint")
        parser.add_argument("--path", default="/")
        parser.add_argument("--state-dir", required=True)
        parser.add_argument("--master", default="")
        parser.add_argument("--allow-other", action="store_true")
        parser.add_argument("--writable", action="store_true")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MountSpec:
        return cls(
            args.mountpoint,
            args.path,
            args.master,
            str(args.state_dir),
            args.allow_other,
            args.writable,
        )
