"""The `Dataset` document: what data a team needs and how the cluster keeps it. The same
document a Kubernetes custom resource carries (apiVersion reservoir.io/v1alpha1).

    apiVersion: reservoir.io/v1alpha1
    kind: Dataset
    metadata: {name: imagenet}
    spec:
      source: {uri: s3://bucket/imagenet/, endpointUrl: ..., credentials: env}
      path: /datasets/imagenet
      access: ReadOnly | ReadWrite
      sync: {interval: 5m, events: {sqsQueueUrl: ...}}
      preload: {policy: None | Once | Cron | OnChange, schedule: "0 3 * * *",
                paths: [...], replicas: 1}
      cache: {quota: 200Gi, pin: false, idleTTL: 72h, priority: high | normal | low}
      underStore: {maxRequestsPerSecond: 2000, maxBytesPerSecond: 2Gi, maxInFlight: 256}

Every field but `metadata.name` and `spec.source.uri` has a default; an unknown field is an
error naming its path (`spec.cache.qouta`); sizes and durations take the CLI's units
(`200Gi`, `512MiB`, `5m`, `72h`). A dataset becomes a mount at `path` whose options carry
its policies (`mount_options`): the master enforces them there.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from reservoir.common import paths
from reservoir.common.config import parse_duration, parse_size
from reservoir.common.errors import InvalidArgument
from reservoir.common.models import MountOptions, check_queue_url

API_VERSION = "reservoir.io/v1alpha1"
KIND = "Dataset"
ACCESS = ("ReadOnly", "ReadWrite")
POLICIES = ("None", "Once", "Cron", "OnChange")
PRIORITIES = ("high", "normal", "low")
# Where a Kubernetes Secret named by `credentials.secretRef.name` is mounted in the
# servers' pods (deploy/k8s): the credentials file of that name.
SECRET_DIR = "/var/run/reservoir/secrets"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Source:
    uri: str
    endpoint_url: str = ""
    region: str = ""
    # As `reservoir mount --credentials`: env, anonymous or file:PATH (never the secret).
    credentials: str = ""


@dataclass(frozen=True)
class Sync:
    interval_s: float = 0.0  # 0: the master's default metadata interval
    sqs_queue_url: str = ""


@dataclass(frozen=True)
class Preload:
    policy: str = "None"
    schedule: str = ""  # cron, for policy Cron
    paths: tuple[str, ...] = ()  # below the dataset's path; empty: all of it
    replicas: int = 1


@dataclass(frozen=True)
class CachePolicy:
    quota_bytes: int = 0  # 0: no quota
    pin: bool = False
    idle_ttl_s: float = 0.0  # 0: kept until evicted
    priority: str = "normal"


@dataclass(frozen=True)
class UnderStoreLimits:
    max_requests_per_s: int = 0  # 0: unlimited
    max_bytes_per_s: int = 0
    max_in_flight: int = 0


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    source: Source
    path: str
    access: str = "ReadOnly"
    sync: Sync = field(default_factory=Sync)
    preload: Preload = field(default_factory=Preload)
    cache: CachePolicy = field(default_factory=CachePolicy)
    under_store: UnderStoreLimits = field(default_factory=UnderStoreLimits)

    @property
    def writable(self) -> bool:
        return self.access == "ReadWrite"

    def mount_options(self, block_size: int = 0) -> MountOptions:
        """The options of the dataset's mount: its store, and the policies the master and
        workers enforce per mount."""
        return MountOptions(
            endpoint_url=self.source.endpoint_url,
            region=self.source.region,
            block_size=block_size,
            credentials=self.source.credentials,
            metadata_sync=f"interval:{self.sync.interval_s:g}s" if self.sync.interval_s else "",
            writable=self.writable,
            events_queue_url=self.sync.sqs_queue_url,
            quota_bytes=self.cache.quota_bytes,
            priority=self.cache.priority,
            idle_ttl_ms=int(self.cache.idle_ttl_s * 1000),
            max_requests_per_s=self.under_store.max_requests_per_s,
            max_bytes_per_s=self.under_store.max_bytes_per_s,
            max_in_flight=self.under_store.max_in_flight,
            dataset=self.name,
        )

    def preload_paths(self) -> list[str]:
        return [paths.normalize(p) for p in self.preload.paths] or [self.path]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> DatasetSpec:
        d = json.loads(raw)
        return cls(
            name=d["name"],
            source=Source(**d["source"]),
            path=d["path"],
            access=d["access"],
            sync=Sync(**d["sync"]),
            preload=Preload(**{**d["preload"], "paths": tuple(d["preload"]["paths"])}),
            cache=CachePolicy(**d["cache"]),
            under_store=UnderStoreLimits(**d["under_store"]),
        )

    def to_document(self) -> dict[str, Any]:
        """The spec as a document `parse_dataset` reads back (every default spelled out)."""
        spec: dict[str, Any] = {
            "source": {"uri": self.source.uri},
            "path": self.path,
            "access": self.access,
            "sync": {"interval": _seconds(self.sync.interval_s)},
            "preload": {
                "policy": self.preload.policy,
                "paths": list(self.preload.paths),
                "replicas": self.preload.replicas,
            },
            "cache": {
                "quota": self.cache.quota_bytes,
                "pin": self.cache.pin,
                "idleTTL": _seconds(self.cache.idle_ttl_s),
                "priority": self.cache.priority,
            },
            "underStore": {
                "maxRequestsPerSecond": self.under_store.max_requests_per_s,
                "maxBytesPerSecond": self.under_store.max_bytes_per_s,
                "maxInFlight": self.under_store.max_in_flight,
            },
        }
        for key, value in (
            ("endpointUrl", self.source.endpoint_url),
            ("region", self.source.region),
            ("credentials", self.source.credentials),
        ):
            if value:
                spec["source"][key] = value
        if self.sync.sqs_queue_url:
            spec["sync"]["events"] = {"sqsQueueUrl": self.sync.sqs_queue_url}
        if self.preload.schedule:
            spec["preload"]["schedule"] = self.preload.schedule
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.name},
            "spec": spec,
        }


def _seconds(value: float) -> str:
    return f"{value:g}s" if value else "0s"


class _Fields:
    """One mapping of the document, read field by field; what is left unread is unknown."""

    def __init__(self, value: Any, where: str) -> None:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise InvalidArgument(f"{where}: expected a mapping, got {type(value).__name__}")
        self._left = dict(value)
        self.where = where

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def raw(self, key: str) -> Any:
        return self._left.pop(key, None)

    def text(self, key: str, default: str = "") -> str:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise InvalidArgument(f"{self.at(key)}: expected a string, got {value!r}")
        return value

    def choice(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.text(key, default)
        if value not in allowed:
            raise InvalidArgument(f"{self.at(key)}: {value!r} is not one of {', '.join(allowed)}")
        return value

    def size(self, key: str) -> int:
        value = self.raw(key)
        if value is None:
            return 0
        try:
            n = parse_size(value if isinstance(value, int) else str(value))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{self.at(key)}: {exc} (e.g. 200Gi, 512MiB)") from exc
        if n < 0:
            raise InvalidArgument(f"{self.at(key)}: must not be negative")
        return n

    def count(self, key: str, default: int = 0, least: int = 0) -> int:
        value = self.raw(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InvalidArgument(f"{self.at(key)}: expected a whole number >= {least}")
        return value

    def duration(self, key: str) -> float:
        value = self.raw(key)
        if value is None:
            return 0.0
        try:
            return parse_duration(str(value))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{self.at(key)}: {exc}") from exc

    def flag(self, key: str) -> bool:
        value = self.raw(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise InvalidArgument(f"{self.at(key)}: expected true or false")
        return value

    def mapping(self, key: str) -> _Fields:
        return _Fields(self.raw(key), self.at(key))

    def done(self) -> None:
        if self._left:
            unknown = sorted(self._left)[0]
            raise InvalidArgument(f"{self.at(unknown)}: unknown field")


def parse_dataset(document: Any) -> DatasetSpec:
    """The spec a `Dataset` document (parsed YAML or JSON) declares, or InvalidArgument
    naming the field that is wrong."""
    top = _Fields(document, "")
    api = top.text("apiVersion", API_VERSION)
    if api != API_VERSION:
        raise InvalidArgument(f"apiVersion: {api!r}; this cluster reads {API_VERSION}")
    kind = top.text("kind", KIND)
    if kind != KIND:
        raise InvalidArgument(f"kind: {kind!r}; expected {KIND}")
    meta = top.mapping("metadata")
    name = meta.text("name")
    if not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"metadata.name: required, lowercase letters, digits and '-' (at most 63), got {name!r}"
        )
    for ignored in ("namespace", "labels", "annotations", "uid", "resourceVersion",
                    "generation", "creationTimestamp", "managedFields", "finalizers"):  # fmt: skip
        meta.raw(ignored)  # Kubernetes' own: a CR's metadata carries them
    meta.done()
    top.raw("status")  # a document read back from the cluster may carry its status
    spec = top.mapping("spec")
    top.done()

    src = spec.mapping("source")
    uri = src.text("uri")
    if not uri or "://" not in uri:
        raise InvalidArgument("spec.source.uri: required, e.g. s3://bucket/prefix/")
    source = Source(
        uri=uri,
        endpoint_url=src.text("endpointUrl"),
        region=src.text("region"),
        credentials=_credentials(src),
    )
    src.done()
    path = paths.normalize(spec.text("path", f"/datasets/{name}"))
    if path == paths.ROOT:
        raise InvalidArgument("spec.path: cannot be /")
    access = spec.choice("access", ACCESS, "ReadOnly")

    s = spec.mapping("sync")
    interval = s.duration("interval")
    events = s.mapping("events")
    queue = events.text("sqsQueueUrl")
    if queue:
        try:
            check_queue_url(queue)
        except InvalidArgument as exc:
            raise InvalidArgument(f"spec.sync.events.sqsQueueUrl: {exc}") from exc
    events.done()
    s.done()

    p = spec.mapping("preload")
    policy = p.choice("policy", POLICIES, "None")
    schedule = p.text("schedule")
    if policy == "Cron":
        _check_cron(schedule)
    elif schedule:
        raise InvalidArgument("spec.preload.schedule: only with policy Cron")
    listed = p.raw("paths") or []
    if not isinstance(listed, list) or not all(isinstance(x, str) for x in listed):
        raise InvalidArgument("spec.preload.paths: expected a list of paths")
    below = tuple(_below(path, x) for x in listed)
    replicas = p.count("replicas", 1, least=1)
    p.done()

    c = spec.mapping("cache")
    cache = CachePolicy(
        quota_bytes=c.size("quota"),
        pin=c.flag("pin"),
        idle_ttl_s=c.duration("idleTTL"),
        priority=c.choice("priority", PRIORITIES, "normal"),
    )
    c.done()

    u = spec.mapping("underStore")
    limits = UnderStoreLimits(
        max_requests_per_s=u.count("maxRequestsPerSecond"),
        max_bytes_per_s=u.size("maxBytesPerSecond"),
        max_in_flight=u.count("maxInFlight"),
    )
    u.done()
    spec.done()
    return DatasetSpec(
        name=name,
        source=source,
        path=path,
        access=access,
        sync=Sync(interval_s=interval, sqs_queue_url=queue),
        preload=Preload(policy=policy, schedule=schedule, paths=below, replicas=replicas),
        cache=cache,
        under_store=limits,
    )


def _credentials(src: _Fields) -> str:
    """`credentials`: as the mount flag takes it (env, anonymous, file:PATH), or a mapping
    {secretRef: {name}} naming a Kubernetes Secret mounted where the servers read it."""
    value = src.raw("credentials")
    where = src.at("credentials")
    if value is None:
        return ""
    if isinstance(value, str):
        if value in ("env", "anonymous") or value.startswith("file:"):
            return value
        raise InvalidArgument(f"{where}: env, anonymous, file:PATH or {{secretRef: {{name}}}}")
    ref = _Fields(value, where).mapping("secretRef")
    name = ref.text("name")
    ref.raw("key")
    ref.done()
    if not _NAME.fullmatch(name):
        raise InvalidArgument(f"{where}.secretRef.name: a Secret's name, got {name!r}")
    return f"file:{SECRET_DIR}/{name}/credentials"


def _below(top: str, path: str) -> str:
    full = paths.normalize(path if path.startswith("/") else f"{top}/{path}")
    if not paths.is_within(full, top):
        raise InvalidArgument(f"spec.preload.paths: {path} is not below {top}")
    return full


def _check_cron(schedule: str) -> None:
    from croniter import croniter

    if not schedule or not croniter.is_valid(schedule):
        raise InvalidArgument(
            f"spec.preload.schedule: {schedule!r} is not a cron schedule (e.g. '0 3 * * *')"
        )
