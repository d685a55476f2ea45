"""What a pod asks of Reservoir, read from its annotations (and labels): its datasets,
whether it must run where they are, and a POSIX mount of the namespace."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reservoir.common.errors import InvalidArgument

DATASETS = "reservoir.io/datasets"  # "a,b": the datasets the pod reads
LOCALITY = "reservoir.io/locality"  # "required": only nodes holding enough of them
FRACTION = "reservoir.io/locality-fraction"  # "0.3": the share "required" means
FUSE = "reservoir.io/fuse"  # "/data": mount the node's FUSE mount there
FUSE_PATH = "reservoir.io/fuse-path"  # "/datasets/imagenet": which part of it


@dataclass(frozen=True, slots=True)
class PodRequest:
    datasets: tuple[str, ...] = ()
    required: bool = False
    min_fraction: float | None = None  # None: the server's setting
    fuse_mount: str = ""  # where in the containers; "" = no mount
    fuse_path: str = "/"  # below the node's FUSE mount point

    @property
    def wants_placement(self) -> bool:
        return bool(self.datasets)


def pod_request(pod: Mapping[str, Any]) -> PodRequest:
    """A pod's request; InvalidArgument for what Kubernetes would not have made (a pod
    that is not an object) or an annotation that cannot mean anything."""
    if not isinstance(pod, Mapping):
        raise InvalidArgument("pod: expected an object")
    metadata = pod.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InvalidArgument("pod.metadata: expected an object")
    annotations = _strings(metadata, "annotations")
    labels = _strings(metadata, "labels")
    # An annotation may list datasets; a label value cannot hold a comma, so names one.
    raw = annotations.get(DATASETS) or labels.get(DATASETS, "")
    datasets = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    locality = (annotations.get(LOCALITY) or labels.get(LOCALITY, "preferred")).strip().lower()
    if locality not in ("required", "preferred"):
        raise InvalidArgument(f"{LOCALITY}: {locality!r} is neither required nor preferred")
    fraction: float | None = None
    if FRACTION in annotations:
        try:
            fraction = float(annotations[FRACTION])
        except ValueError as exc:
            raise InvalidArgument(f"{FRACTION}: {annotations[FRACTION]!r} is no number") from exc
        if not 0.0 <= fraction <= 1.0:
            raise InvalidArgument(f"{FRACTION}: {fraction} is not within 0..1")
    fuse_mount = annotations.get(FUSE, "").strip()
    if fuse_mount and not posixpath.isabs(fuse_mount):
        raise InvalidArgument(f"{FUSE}: {fuse_mount!r} is not an absolute path")
    raw_path = annotations.get(FUSE_PATH, "/").strip()
    if ".." in raw_path.split("/"):
        raise InvalidArgument(f"{FUSE_PATH}: {raw_path!r} leaves the mount")
    fuse_path = posixpath.normpath("/" + raw_path)
    return PodRequest(datasets, locality == "required", fraction, fuse_mount, fuse_path)


def _strings(metadata: Mapping[str, Any], key: str) -> dict[str, str]:
    found = metadata.get(key) or {}
    if not isinstance(found, Mapping) or not all(isinstance(v, str) for v in found.values()):
        raise InvalidArgument(f"pod.metadata.{key}: expected an object of strings")
    return dict(found)


def pod_name(pod: Mapping[str, Any]) -> str:
    """namespace/name for logs (a pod being created may have only a generateName)."""
    metadata = pod.get("metadata") or {}
    name = metadata.get("name") or metadata.get("generateName", "")
    return f"{metadata.get('namespace', '')}/{name}"
