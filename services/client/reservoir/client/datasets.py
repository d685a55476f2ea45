"""What the SDK returns for a declared dataset: the spec as the cluster holds it (every
default spelled out) and the status the leader wrote, as plain data."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reservoir.common.errors import InvalidArgument
from reservoir.v1 import master_pb2


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    document: dict[str, Any]  # apiVersion, kind, metadata, spec
    status: dict[str, Any]  # phase, conditions, last_sync_ms, cached_bytes, runs, ...
    generation: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    deleting: bool = False

    @property
    def phase(self) -> str:
        return str(self.status.get("phase", "Pending"))

    @property
    def path(self) -> str:
        return str(self.document["spec"]["path"])

    @property
    def ready(self) -> bool:
        """Reconciled as its latest spec says (the status is of this generation)."""
        return self.phase == "Ready" and self.status.get("observed_generation") == self.generation

    @property
    def cached_percent(self) -> float:
        return float(self.status.get("cached_percent", 0.0))

    @classmethod
    def from_proto(cls, msg: master_pb2.Dataset) -> Dataset:
        return cls(
            name=msg.name,
            document=json.loads(msg.document_json or "{}"),
            status=json.loads(msg.status_json or "{}"),
            generation=msg.generation,
            created_ms=msg.created_ms,
            updated_ms=msg.updated_ms,
            deleting=msg.deleting,
        )


def document_of(source: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    """A Dataset document from a mapping, YAML or JSON text, or a file of either."""
    if isinstance(source, Mapping):
        return dict(source)
    text = source.read_text() if isinstance(source, Path) else source
    import yaml  # JSON is YAML too

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidArgument(f"not a YAML or JSON document: {exc}") from exc
    if not isinstance(document, dict):
        raise InvalidArgument("a Dataset document is a mapping (apiVersion, kind, metadata, spec)")
    return document
