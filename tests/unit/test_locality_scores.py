"""How nodes rank for a pod (pure): scores 0-10 by cached bytes, the `required` filter,
the webhook's weighted preferred affinity, and what a pod's annotations ask."""

from __future__ import annotations

import pytest

from reservoir.client.locality import HostBytes, Locality
from reservoir.common.errors import InvalidArgument
from reservoir.k8s.locality_scores import (
    NODE_WEIGHT,
    REGION_LABEL,
    ZONE_LABEL,
    node_scores,
    nodes_short_of,
    preferred_affinity,
)
from reservoir.k8s.pod_requests import pod_request

NODES = ["a", "b", "c", "d"]


def _locality(total: int, **hosts: int) -> Locality:
    zone = {"a": "z1", "b": "z1", "c": "z2"}
    found = tuple(HostBytes(h, zone[h], "r1", n) for h, n in hosts.items())
    zones: dict[str, int] = {}
    for h in found:
        zones[h.zone] = zones.get(h.zone, 0) + h.bytes
    return Locality("/d", 1, total, sum(hosts.values()), found, zones, {"r1": sum(hosts.values())})


def test_the_node_holding_most_bytes_scores_ten_and_the_others_by_their_share() -> None:
    scores = node_scores(NODES, [_locality(1000, a=100, b=400), _locality(500, b=100, c=250)])
    assert scores == {"a": 2, "b": 10, "c": 5, "d": 0}
    assert max(scores, key=scores.__getitem__) == "b"


def test_every_node_scores_zero_when_nothing_is_cached() -> None:
    assert node_scores(NODES, [_locality(1000)]) == dict.fromkeys(NODES, 0)


def test_required_keeps_only_nodes_holding_the_set_fraction_of_all_bytes() -> None:
    localities = [_locality(1000, a=600, b=300, c=100)]
    short = nodes_short_of(NODES, localities, 0.3)
    assert sorted(short) == ["c", "d"]
    assert "10.0%" in short["c"] and "30.0%" in short["c"]
    # A zero fraction still asks for some bytes there.
    assert sorted(nodes_short_of(NODES, localities, 0.0)) == ["d"]


def test_affinity_prefers_nodes_by_bytes_up_to_100_then_zones_50_and_regions_20() -> None:
    terms = preferred_affinity([_locality(1000, a=200, b=800, c=400)], max_nodes=2)
    by_node = [
        (t["weight"], t["preference"]["matchFields"][0]["values"][0])
        for t in terms
        if "matchFields" in t["preference"]
    ]
    assert by_node == [(NODE_WEIGHT, "b"), (50, "c")]  # the two nodes holding most
    by_label = [
        (t["weight"], t["preference"]["matchExpressions"][0]["key"],
         t["preference"]["matchExpressions"][0]["values"])
        for t in terms
        if "matchExpressions" in t["preference"]
    ]  # fmt: skip
    assert by_label == [
        (50, ZONE_LABEL, ["z1"]),
        (20, ZONE_LABEL, ["z2"]),
        (20, REGION_LABEL, ["r1"]),
    ]
    assert all(1 <= t["weight"] <= 100 for t in terms)


def test_no_affinity_when_nothing_is_cached() -> None:
    assert preferred_affinity([_locality(1000)], max_nodes=8) == []


def test_a_pod_names_datasets_by_annotation_list_or_by_one_label() -> None:
    annotated = {"metadata": {"annotations": {"reservoir.io/datasets": " a, b,a "}}}
    assert pod_request(annotated).datasets == ("a", "b")
    labelled = {"metadata": {"labels": {"reservoir.io/datasets": "imagenet"}}}
    asked = pod_request(labelled)
    assert asked.datasets == ("imagenet",) and not asked.required and not asked.fuse_mount
    assert not pod_request({"metadata": {}}).wants_placement


def test_a_pod_asking_required_with_its_own_fraction_and_a_fuse_mount() -> None:
    asked = pod_request(
        {
            "metadata": {
                "annotations": {
                    "reservoir.io/datasets": "a",
                    "reservoir.io/locality": "Required",
                    "reservoir.io/locality-fraction": "0.25",
                    "reservoir.io/fuse": "/data",
                    "reservoir.io/fuse-path": "datasets/a",
                }
            }
        }
    )
    assert asked.required and asked.min_fraction == 0.25
    assert (asked.fuse_mount, asked.fuse_path) == ("/data", "/datasets/a")


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        ({"reservoir.io/locality": "always"}, "neither required nor preferred"),
        ({"reservoir.io/locality-fraction": "half"}, "no number"),
        ({"reservoir.io/locality-fraction": "1.5"}, "not within 0..1"),
        ({"reservoir.io/fuse": "data"}, "not an absolute path"),
        ({"reservoir.io/fuse": "/d", "reservoir.io/fuse-path": "/../etc"}, "leaves the mount"),
    ],
)
def test_an_annotation_that_cannot_mean_anything_is_refused_with_its_reason(
    annotations: dict[str, str], reason: str
) -> None:
    with pytest.raises(InvalidArgument, match=reason):
        pod_request({"metadata": {"annotations": annotations}})
