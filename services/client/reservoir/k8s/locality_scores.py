"""How nodes rank for a pod, from its datasets' locality: pure functions, shared by the
scheduler extender and the admission webhook. A node is a worker's host (in Kubernetes
the worker sets RESERVOIR_HOST to its node's name)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from reservoir.client.locality import Locality

# The extender protocol's top score (kube-scheduler's MaxExtenderPriority).
MAX_SCORE = 10
# Preferred-affinity weights, as Fluid gives them: the node itself, its zone, its region.
NODE_WEIGHT = 100
ZONE_WEIGHT = 50
REGION_WEIGHT = 20

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"


def bytes_per_node(localities: Iterable[Locality]) -> dict[str, int]:
    """Cached bytes of all the datasets on each host."""
    totals: dict[str, int] = {}
    for locality in localities:
        for host in locality.hosts:
            totals[host.host] = totals.get(host.host, 0) + host.bytes
    return totals


def node_scores(nodes: Sequence[str], localities: Sequence[Locality]) -> dict[str, int]:
    """0..MAX_SCORE per node, proportional to its cached bytes of the datasets (the node
    holding most gets MAX_SCORE); all 0 when no node holds any."""
    held = bytes_per_node(localities)
    most = max((held.get(n, 0) for n in nodes), default=0)
    if most == 0:
        return dict.fromkeys(nodes, 0)
    return {n: round(MAX_SCORE * held.get(n, 0) / most) for n in nodes}


def nodes_short_of(
    nodes: Sequence[str], localities: Sequence[Locality], min_fraction: float
) -> dict[str, str]:
    """The nodes holding less than `min_fraction` of the datasets' bytes, with the reason
    (what the scheduler shows in the pod's events)."""
    held = bytes_per_node(localities)
    total = sum(locality.bytes for locality in localities)
    short: dict[str, str] = {}
    for node in nodes:
        fraction = held.get(node, 0) / total if total else 0.0
        if fraction < min_fraction or (min_fraction == 0.0 and held.get(node, 0) == 0):
            short[node] = (
                f"reservoir: node holds {100 * fraction:.1f}% of the pod's datasets "
                f"(required: {100 * min_fraction:.1f}%)"
            )
    return short


def _weighted(counts: dict[str, int], top: int) -> list[tuple[str, int]]:
    """(name, weight 1..top) for every name holding bytes, most first."""
    most = max(counts.values(), default=0)
    ranked = sorted(((n, b) for n, b in counts.items() if n and b > 0), key=lambda x: -x[1])
    return [(n, max(1, round(top * b / most))) for n, b in ranked]


def preferred_affinity(localities: Sequence[Locality], max_nodes: int) -> list[dict[str, Any]]:
    """Preferred node-affinity terms (preferredDuringSchedulingIgnoredDuringExecution):
    the hosts holding most bytes (weight up to NODE_WEIGHT, by their bytes), then their
    zones (ZONE_WEIGHT) and regions (REGION_WEIGHT). Empty when nothing is cached."""
    zones: dict[str, int] = {}
    regions: dict[str, int] = {}
    for locality in localities:
        for name, count in locality.zones.items():
            zones[name] = zones.get(name, 0) + count
        for name, count in locality.regions.items():
            regions[name] = regions.get(name, 0) + count
    terms: list[dict[str, Any]] = []
    for node, weight in _weighted(bytes_per_node(localities), NODE_WEIGHT)[:max_nodes]:
        # By the node's name (a field), not its hostname label: the worker's host is
        # spec.nodeName, and the hostname label may differ from it.
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        terms.append({"weight": weight, "preference": term})
    for label, counts, top in (
        (ZONE_LABEL, zones, ZONE_WEIGHT),
        (REGION_LABEL, regions, REGION_WEIGHT),
    ):
        for name, weight in _weighted(counts, top):
            term = {"matchExpressions": [{"key": label, "operator": "In", "values": [name]}]}
            terms.append({"weight": weight, "preference": term})
    return terms
