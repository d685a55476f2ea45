"""S3 event notifications, as an SQS message carries them, read into the paths they name.

S3 sends `{"Records": [...]}` to a queue directly, or wrapped in an SNS notification
(`{"Type": "Notification", "Message": "<the same JSON>"}`) when a topic fans out; a new
notification configuration first sends an `s3:TestEvent`. Object keys arrive URL-encoded
(`+` for a space). An event's own ETag and size are not used: events come late, twice
and out of order, so what an event means is only "look at this object again".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote_plus, urlsplit

from reservoir.common import paths
from reservoir.common.errors import InvalidArgument
from reservoir.common.models import Mount

EventKind = Literal["created", "removed"]

# eventName prefixes (after an optional "s3:") and what they mean for the namespace.
_KINDS: dict[str, EventKind] = {
    "ObjectCreated:": "created",
    "ObjectRemoved:": "removed",
    "LifecycleExpiration:": "removed",
}


@dataclass(frozen=True)
class S3Event:
    kind: EventKind
    bucket: str
    key: str


def parse_s3_events(body: str) -> list[S3Event]:
    """The object events in one SQS message body; [] for a message that names none (a
    test event, a restore or replication event). InvalidArgument when it is not an S3
    event notification at all."""
    doc = _json(body)
    if doc.get("Type") == "Notification" and isinstance(doc.get("Message"), str):
        doc = _json(doc["Message"])
    if doc.get("Event") == "s3:TestEvent":
        return []
    records = doc.get("Records")
    if not isinstance(records, list):
        raise InvalidArgument("not an S3 event notification (no Records)")
    events: list[S3Event] = []
    for record in records:
        event = _event(record)
        if event is not None:
            events.append(event)
    return events


def _json(text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"not an S3 event notification: {exc}") from exc
    if not isinstance(doc, dict):
        raise InvalidArgument("not an S3 event notification (not a JSON object)")
    return doc


def _event(record: Any) -> S3Event | None:
    if not isinstance(record, dict) or record.get("eventSource") != "aws:s3":
        return None
    name = str(record.get("eventName", ""))
    name = name.removeprefix("s3:")
    kind = next((k for prefix, k in _KINDS.items() if name.startswith(prefix)), None)
    s3 = record.get("s3")
    if kind is None or not isinstance(s3, dict):
        return None
    bucket = s3.get("bucket", {}).get("name")
    key = s3.get("object", {}).get("key")
    if not isinstance(bucket, str) or not isinstance(key, str) or not key:
        raise InvalidArgument("S3 event record without a bucket name or object key")
    return S3Event(kind, bucket, unquote_plus(key))


def path_of(mount: Mount, bucket: str, key: str) -> str | None:
    """The Reservoir path of an object of `mount`'s under-store; None when the object is
    not below the mount (another prefix or bucket on the same queue), is a directory
    marker, or has a name no Reservoir path can express."""
    uri = urlsplit(mount.uri)
    prefix = uri.path.lstrip("/")
    if uri.scheme != "s3" or uri.netloc != bucket or not key.startswith(prefix):
        return None
    rest = key[len(prefix) :]
    if not rest or rest.endswith("/"):
        return None
    path = paths.join(mount.path, rest)
    try:
        if paths.normalize(path) != path:
            return None
    except InvalidArgument:
        return None
    return path
