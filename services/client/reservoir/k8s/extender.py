"""The kube-scheduler extender protocol (k8s.io/kube-scheduler/extender/v1) at /filter
and /prioritize.

The scheduler encodes these types with Go's encoding/json and no field tags, so their
keys are the Go field names as they are: `Pod`, `Nodes`, `NodeNames` in, `Nodes`,
`NodeNames`, `FailedNodes`, `FailedAndUnresolvableNodes`, `Error` and `Host`/`Score` out;
the Kubernetes objects inside (the Pod, the NodeList) keep their own lowercase keys.
Go decodes keys case-insensitively, so requests are read the same way here (extenders
written against copies of the types with lowercase tags send `pod`, `nodes`...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from reservoir.common import logs
from reservoir.common.errors import InvalidArgument, ReservoirError

from .http_serving import healthz
from .locality_lookup import LocalityLookup
from .locality_scores import node_scores, nodes_short_of
from .pod_requests import PodRequest, pod_name, pod_request

log = logs.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: Mapping[str, Any]
    nodes: list[str]  # the candidates' names, in the order given
    node_list: Mapping[str, Any] | None  # the NodeList, when the scheduler sent one

    @classmethod
    def parse(cls, body: bytes) -> ExtenderArgs:
        try:
            document = json.loads(body)
        except ValueError as exc:
            raise InvalidArgument(f"ExtenderArgs: not JSON ({exc})") from exc
        if not isinstance(document, dict):
            raise InvalidArgument("ExtenderArgs: expected a JSON object")
        keys = {k.lower(): v for k, v in document.items()}
        pod = keys.get("pod")
        if not isinstance(pod, dict):
            raise InvalidArgument("ExtenderArgs: Pod is missing")
        node_list = keys.get("nodes")
        names = keys.get("nodenames")
        if node_list is not None:
            items = node_list.get("items") if isinstance(node_list, dict) else None
            if not isinstance(items, list) or not all(
                isinstance(i, dict) and isinstance((i.get("metadata") or {}).get("name"), str)
                for i in items
            ):
                raise InvalidArgument("ExtenderArgs: Nodes is not a NodeList of named nodes")
            return cls(pod, [i["metadata"]["name"] for i in items], node_list)
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return cls(pod, list(names), None)
        raise InvalidArgument("ExtenderArgs: neither Nodes nor NodeNames is given")

    def kept(self, names: set[str]) -> dict[str, Any]:
        """The candidates in `names`, the way they came (a NodeList or names)."""
        if self.node_list is not None:
            items = [i for i in self.node_list["items"] if i["metadata"]["name"] in names]
            return {"Nodes": {**self.node_list, "items": items}, "NodeNames": None}
        return {"Nodes": None, "NodeNames": [n for n in self.nodes if n in names]}


class SchedulerExtender:
    def __init__(self, lookup: LocalityLookup, min_fraction: float) -> None:
        self._lookup = lookup
        self._min_fraction = min_fraction

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/filter", self.filter)
        app.router.add_post("/prioritize", self.prioritize)
        app.router.add_get("/healthz", healthz)
        return app

    async def _args(self, request: web.Request) -> tuple[ExtenderArgs, PodRequest]:
        try:
            args = ExtenderArgs.parse(await request.read())
            return args, pod_request(args.pod)
        except InvalidArgument as exc:
            log.warning("extender_bad_request", path=request.path, reason=str(exc))
            raise web.HTTPBadRequest(text=str(exc)) from exc

    async def filter(self, request: web.Request) -> web.Response:
        args, asked = await self._args(request)
        everyone = {"FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
        if not asked.wants_placement or not asked.required:
            # Never filters a pod that did not ask: a scheduler keeps working unchanged
            # for every pod that is not Reservoir's.
            return web.json_response(args.kept(set(args.nodes)) | everyone)
        min_fraction = self._min_fraction if asked.min_fraction is None else asked.min_fraction
        try:
            localities = await self._lookup.datasets(asked.datasets)
        except ReservoirError as exc:
            log.warning("extender_filter_failed", pod=pod_name(args.pod), error=str(exc))
            return web.json_response(args.kept(set()) | everyone | {"Error": f"reservoir: {exc}"})
        short = nodes_short_of(args.nodes, localities, min_fraction)
        log.info("extender_filtered", pod=pod_name(args.pod), kept=len(args.nodes) - len(short))
        return web.json_response(
            args.kept(set(args.nodes) - set(short)) | everyone | {"FailedNodes": short}
        )

    async def prioritize(self, request: web.Request) -> web.Response:
        args, asked = await self._args(request)
        scores = dict.fromkeys(args.nodes, 0)
        if asked.wants_placement:
            try:
                scores = node_scores(args.nodes, await self._lookup.datasets(asked.datasets))
            except ReservoirError as exc:
                # The scheduler ignores a prioritize error anyway: an even score says the
                # same and keeps its log quiet.
                log.warning("extender_prioritize_failed", pod=pod_name(args.pod), error=str(exc))
        return web.json_response([{"Host": n, "Score": scores[n]} for n in args.nodes])
