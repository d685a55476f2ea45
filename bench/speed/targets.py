"""Issue #8's targets: which rows each ratio divides, the target, and whether it is met.

Pure code over medians, so it is unit-tested apart from any cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Row systems (the dataset is the other half of a row's key).
BOTO3 = "boto3 direct"
S3FS = "s3fs direct"
SIMPLECACHE_1 = "s3fs+simplecache epoch 1"
SIMPLECACHE_2 = "s3fs+simplecache epoch 2"
COLD_READ = "reservoir cold, read"
# "remote": a client on no worker's host (short-circuit off): the data port by default.
WARM_REMOTE_READ = "reservoir warm, remote, read"
WARM_GRPC_ONLY_READ = "reservoir warm, gRPC only, read"
WARM_SC_READ = "reservoir warm, short-circuit, read"
WARM_REMOTE_MANY = "reservoir warm, remote, read_many"
WARM_SC_MANY = "reservoir warm, short-circuit, read_many"
BOTO3_ONE_GET = "boto3 one get_object"
CKPT_READ = "reservoir warm, remote, open().read()"
CKPT_READINTO = "reservoir warm, remote, readinto 16 MiB"
CKPT_SC_READ = "reservoir warm, short-circuit, open().read()"
CKPT_SC_READINTO = "reservoir warm, short-circuit, readinto 16 MiB"
CKPT_COLD = "reservoir cold, readinto 16 MiB"
PROCS_1 = "reservoir warm, read_many, 1 process"
PROCS_N = "reservoir warm, read_many, 4 processes"
# boto3 (16 threads, get_object per file) through `reservoir gateway` (issue #22).
GATEWAY_COLD = "gateway cold, boto3 get_object"
GATEWAY_WARM = "gateway warm, boto3 get_object"
TCP = "ceiling: TCP loopback"
PAGE_CACHE = "ceiling: page-cache readinto"
CEILING = "-"  # the dataset of the ceiling rows

FILES_S, MB_S = "files_s", "mb_s"


@dataclass(frozen=True)
class Target:
    metric: str
    numerator: tuple[str, str]  # (dataset, system)
    denominator: tuple[str, str]
    unit: str  # FILES_S or MB_S: which median the ratio divides
    target: float

    def label(self) -> str:
        return f"{self.metric} >= {self.target:g}"


TARGETS: tuple[Target, ...] = (
    Target("cold small, read / boto3", ("small", COLD_READ), ("small", BOTO3), FILES_S, 0.9),
    Target("cold large, read / boto3", ("large", COLD_READ), ("large", BOTO3), MB_S, 0.8),
    Target(
        "warm small, remote read / simplecache e2",
        ("small", WARM_REMOTE_READ),
        ("small", SIMPLECACHE_2),
        FILES_S,
        1.0,
    ),
    Target(
        "warm small, short-circuit read / simplecache e2",
        ("small", WARM_SC_READ),
        ("small", SIMPLECACHE_2),
        FILES_S,
        2.0,
    ),
    Target(
        "warm large, remote / simplecache e2",
        ("large", WARM_REMOTE_READ),
        ("large", SIMPLECACHE_2),
        MB_S,
        0.6,
    ),
    Target(
        "warm large, remote / TCP ceiling", ("large", WARM_REMOTE_READ), (CEILING, TCP), MB_S, 0.4
    ),
    Target(
        "warm large, short-circuit / simplecache e2",
        ("large", WARM_SC_READ),
        ("large", SIMPLECACHE_2),
        MB_S,
        1.2,
    ),
    Target(
        "checkpoint, open().read() / boto3 get_object",
        ("checkpoint", CKPT_READ),
        ("checkpoint", BOTO3_ONE_GET),
        MB_S,
        3.0,
    ),
    Target(
        "checkpoint, readinto 16 MiB / boto3 get_object",
        ("checkpoint", CKPT_READINTO),
        ("checkpoint", BOTO3_ONE_GET),
        MB_S,
        3.0,
    ),
    # The same reader on a worker's host, where the default client reads block files.
    Target(
        "checkpoint, short-circuit open().read() / boto3 get_object",
        ("checkpoint", CKPT_SC_READ),
        ("checkpoint", BOTO3_ONE_GET),
        MB_S,
        3.0,
    ),
    Target(
        "checkpoint, short-circuit readinto 16 MiB / boto3 get_object",
        ("checkpoint", CKPT_SC_READINTO),
        ("checkpoint", BOTO3_ONE_GET),
        MB_S,
        3.0,
    ),
    # The S3 gateway (issue #22): boto3 against it, beside boto3 against S3 and the SDK.
    Target(
        "gateway cold small / boto3 direct",
        ("small", GATEWAY_COLD),
        ("small", BOTO3),
        FILES_S,
        1.0,
    ),
    Target(
        "gateway warm small / boto3 direct",
        ("small", GATEWAY_WARM),
        ("small", BOTO3),
        FILES_S,
        3.0,
    ),
    Target(
        "gateway warm large / SDK warm remote read",
        ("large", GATEWAY_WARM),
        ("large", WARM_REMOTE_READ),
        MB_S,
        0.5,
    ),
    # Issue #30: what an S3 client gains by pointing at the gateway instead of its S3.
    Target(
        "gateway warm large / boto3 direct",
        ("large", GATEWAY_WARM),
        ("large", BOTO3),
        MB_S,
        1.5,
    ),
    Target(
        "4 processes read_many / 1 process",
        ("small", PROCS_N),
        ("small", PROCS_1),
        FILES_S,
        1.6,
    ),
)


@dataclass(frozen=True)
class Outcome:
    target: Target
    numerator: float | None
    denominator: float | None
    problems: tuple[str, ...]  # why a row does not count (not warm, not cold, missing)

    @property
    def ratio(self) -> float | None:
        if self.numerator is None or not self.denominator:
            return None
        return self.numerator / self.denominator

    @property
    def met(self) -> bool:
        ratio = self.ratio
        return ratio is not None and not self.problems and ratio >= self.target.target

    @property
    def verdict(self) -> str:
        if self.ratio is None:
            return "not measured"
        if self.problems:
            return "invalid"
        return "met" if self.met else "not met"

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.target.metric,
            "numerator": list(self.target.numerator),
            "denominator": list(self.target.denominator),
            "unit": self.target.unit,
            "numerator_median": self.numerator,
            "denominator_median": self.denominator,
            "ratio": self.ratio,
            "target": self.target.target,
            "met": self.met,
            "verdict": self.verdict,
            "problems": list(self.problems),
        }


def evaluate(
    medians: Mapping[tuple[str, str], Mapping[str, float]],
    problems: Mapping[tuple[str, str], list[str]],
    targets: tuple[Target, ...] = TARGETS,
) -> list[Outcome]:
    """`medians[(dataset, system)][unit]`: the medians of one run of the bench;
    `problems[(dataset, system)]`: the checks that row failed."""
    out = []
    for t in targets:
        num = medians.get(t.numerator, {}).get(t.unit)
        den = medians.get(t.denominator, {}).get(t.unit)
        found = [
            f"{key[1]}: {p}" for key in (t.numerator, t.denominator) for p in problems.get(key, [])
        ]
        out.append(Outcome(t, num, den, tuple(dict.fromkeys(found))))
    return out


def _value(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f} files/s" if unit == FILES_S else f"{x:,.0f} MB/s"


def targets_table(outcomes: list[Outcome]) -> str:
    header = f"{'metric':<48} {'value':>15} {'baseline':>15} {'ratio':>6} {'target':>7}  verdict"
    lines = [header, "-" * len(header)]
    for o in outcomes:
        t = o.target
        ratio = f"{o.ratio:.2f}" if o.ratio is not None else "-"
        lines.append(
            f"{t.metric:<48} {_value(o.numerator, t.unit):>15} "
            f"{_value(o.denominator, t.unit):>15} {ratio:>6} {'>= ' + format(t.target, 'g'):>7}  "
            f"{o.verdict}"
        )
        lines.extend(f"{'':<50}! {p}" for p in o.problems)
    met = sum(o.met for o in outcomes)
    lines.append(f"{met} of {len(outcomes)} targets met")
    return "\n".join(lines)
