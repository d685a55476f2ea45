"""Which S3 operation a request is, read off S3's own operation table.

botocore ships the S3 service model: every operation's HTTP method, URI template
(`/{Bucket}/{Key+}?tagging`) and the members of its input that travel in the query string
or in headers, with those the operation requires. `OperationTable` is built from it once,
at start, and names each request by the operation whose wire form it has, the most
specific one winning (`PUT /b/k?tagging` is PutObjectTagging, not PutObject). The gateway
serves the operations it implements and refuses every other one by name, so no request
can reach a write it was not meant for.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import parse_qsl


class Level(Enum):
    """What a request's path names."""

    SERVICE = "service"  # `/`
    BUCKET = "bucket"  # `/{Bucket}`
    OBJECT = "object"  # `/{Bucket}/{Key+}`


@dataclass(frozen=True)
class OperationShape:
    """One operation's wire form."""

    name: str
    method: str
    level: Level
    # The query the URI template carries: `?tagging` -> {"tagging": None};
    # `?list-type=2` -> {"list-type": "2"}.
    markers: tuple[tuple[str, str | None], ...]
    required_query: frozenset[str]
    required_headers: frozenset[str]  # lower case
    query: frozenset[str]  # every query name it may carry (markers included)

    def marked(self, query: Mapping[str, str]) -> bool:
        """Whether the query carries this operation's markers."""
        return all(
            name in query and (value is None or query[name] == value)
            for name, value in self.markers
        )

    def missing(self, query: Mapping[str, str], headers: Collection[str]) -> list[str]:
        """The required query names and headers (lower case) the request lacks."""
        lowered = {h.lower() for h in headers}
        return sorted(self.required_query.difference(query)) + sorted(
            self.required_headers.difference(lowered)
        )

    def rank(self, query: Mapping[str, str], headers: Collection[str]) -> tuple[int, bool, int]:
        asked = len(self.required_query) + len(self.required_headers)
        return len(self.markers), not self.missing(query, headers), asked


class OperationTable:
    """Request -> operation name, for every operation of S3's model."""

    def __init__(self, shapes: Iterable[OperationShape], served: Collection[str]) -> None:
        self._by_route: dict[tuple[str, Level], list[OperationShape]] = {}
        for shape in shapes:
            self._by_route.setdefault((shape.method, shape.level), []).append(shape)
        self.served = frozenset(served)
        self.shapes = {s.name: s for group in self._by_route.values() for s in group}

    @classmethod
    def from_botocore(cls, served: Collection[str]) -> OperationTable:
        return cls(_model_shapes(), served)

    def classify(
        self, method: str, level: Level, query: Mapping[str, str], headers: Collection[str]
    ) -> OperationShape | None:
        """The operation a request is; None when it has the form of none. Of the
        operations whose markers the query carries, the one with most markers (a `?attributes`
        without its header is still GetObjectAttributes, never GetObject), then one whose
        required members are all there, then the one asking most of the request; of equals
        (S3 has a few pairs with one wire form, such as GetBucketLifecycle and
        GetBucketLifecycleConfiguration), a served one, then by name. The caller checks
        `missing` of what it gets."""
        marked = [s for s in self._by_route.get((method, level), ()) if s.marked(query)]
        if not marked:
            return None
        return max(marked, key=lambda s: (*s.rank(query, headers), s.name in self.served, s.name))


def _level(uri_path: str) -> Level | None:
    if uri_path == "/":
        return Level.SERVICE
    if uri_path == "/{Bucket}":
        return Level.BUCKET
    if uri_path == "/{Bucket}/{Key+}":
        return Level.OBJECT
    return None  # WriteGetObjectResponse: an Object Lambda endpoint of its own


@functools.cache
def _model_shapes() -> tuple[OperationShape, ...]:
    import botocore.loaders

    model: dict[str, Any] = botocore.loaders.Loader().load_service_model("s3", "service-2")
    shapes: dict[str, Any] = model["shapes"]
    found = []
    for name, operation in model["operations"].items():
        uri_path, _, uri_query = operation["http"]["requestUri"].partition("?")
        level = _level(uri_path)
        if level is None:
            continue
        markers = tuple(
            (key, value or None) for key, value in parse_qsl(uri_query, keep_blank_values=True)
        )
        input_shape = shapes.get(operation.get("input", {}).get("shape", ""), {})
        members: dict[str, Any] = input_shape.get("members", {})
        required = set(input_shape.get("required", ()))
        query_names, required_query, required_headers = set(), set(), set()
        for member_name, member in members.items():
            location, wire_name = member.get("location"), member.get("locationName", member_name)
            if location == "querystring":
                query_names.add(wire_name)
                if member_name in required:
                    required_query.add(wire_name)
            elif location == "header" and member_name in required:
                required_headers.add(wire_name.lower())
        found.append(
            OperationShape(
                name=name,
                method=operation["http"]["method"],
                level=level,
                markers=markers,
                required_query=frozenset(required_query),
                required_headers=frozenset(required_headers),
                query=frozenset(query_names | {k for k, _ in markers}),
            )
        )
    return tuple(found)
