"""The protocol documents read and written without a server: ExtenderArgs as the
scheduler or a lowercase-tagged copy of its types sends them, and the webhook's JSONPatch
for pods that already carry affinity or volumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reservoir.common.errors import InvalidArgument
from reservoir.k8s.admission import affinity_patch
from reservoir.k8s.extender import ExtenderArgs

DATA = Path(__file__).resolve().parents[1] / "data"
TERM = {"weight": 100, "preference": {"matchFields": []}}
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def test_recorded_extender_args_give_the_candidates_and_keep_the_node_list_shape() -> None:
    args = ExtenderArgs.parse((DATA / "extender_args_prioritize.json").read_bytes())
    assert args.nodes == ["gpu-node-a", "gpu-node-b", "gpu-node-c"]
    kept = args.kept({"gpu-node-c"})
    assert [n["metadata"]["name"] for n in kept["Nodes"]["items"]] == ["gpu-node-c"]
    assert kept["NodeNames"] is None


def test_node_names_and_lowercase_keys_are_read_as_go_reads_them() -> None:
    body = json.dumps({"pod": {"metadata": {}}, "nodenames": ["n1", "n2"]}).encode()
    args = ExtenderArgs.parse(body)
    assert args.nodes == ["n1", "n2"]
    assert args.kept({"n2"}) == {"Nodes": None, "NodeNames": ["n2"]}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[]", "a JSON object"),
        (b'{"Nodes": {"items": []}}', "Pod is missing"),
        (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', "NodeList of named nodes"),
    ],
)
def test_malformed_extender_args_are_refused_with_the_reason(body: bytes, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=reason):
        ExtenderArgs.parse(body)


def test_affinity_is_added_where_the_pod_has_none_and_appended_where_it_has_some() -> None:
    assert affinity_patch({"spec": {}}, [TERM]) == [
        {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {PREFERRED: [TERM]}}}
    ]
    anti = {"spec": {"affinity": {"podAntiAffinity": {}}}}
    assert affinity_patch(anti, [TERM])[0]["path"] == "/spec/affinity/nodeAffinity"
    own = {"weight": 5, "preference": {}}
    prefers = {"spec": {"affinity": {"nodeAffinity": {PREFERRED: [own]}}}}
    assert (
        affinity_patch(prefers, [TERM, TERM])
        == [{"op": "add", "path": f"/spec/affinity/nodeAffinity/{PREFERRED}/-", "value": TERM}] * 2
    )
    assert affinity_patch({"spec": {}}, []) == []
