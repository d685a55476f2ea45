"""A mutating admission webhook (admission.k8s.io/v1 AdmissionReview) for clusters whose
scheduler takes no extender: a pod naming datasets gets preferred node affinity toward
the nodes, zones and regions holding their bytes, and a pod asking for a POSIX mount
gets the node's FUSE mount as a hostPath volume. It never refuses a pod: with the master
unreachable the pod is admitted as it is, with a warning."""

from __future__ import annotations

import base64
import json
import posixpath
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from reservoir.common import logs
from reservoir.common.errors import InvalidArgument, ReservoirError

from .http_serving import healthz
from .locality_lookup import LocalityLookup
from .locality_scores import preferred_affinity
from .pod_requests import PodRequest, pod_name, pod_request

log = logs.get_logger(__name__)

FUSE_VOLUME = "reservoir-fuse"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


class AdmissionWebhook:
    def __init__(self, lookup: LocalityLookup, max_nodes: int, fuse_host_path: str) -> None:
        self._lookup = lookup
        self._max_nodes = max_nodes
        self._fuse_host_path = fuse_host_path

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/mutate", self.mutate)
        app.router.add_get("/healthz", healthz)
        return app

    async def mutate(self, request: web.Request) -> web.Response:
        try:
            review = json.loads(await request.read())
            uid, pod = _request_of(review)
            asked = pod_request(pod)
        except (ValueError, InvalidArgument) as exc:
            log.warning("webhook_bad_request", reason=str(exc))
            raise web.HTTPBadRequest(text=f"AdmissionReview: {exc}") from exc
        response: dict[str, Any] = {"uid": uid, "allowed": True}
        patch: list[dict[str, Any]] = []
        warnings: list[str] = []
        if asked.wants_placement:
            try:
                localities = await self._lookup.datasets(asked.datasets)
                patch += affinity_patch(pod, preferred_affinity(localities, self._max_nodes))
            except ReservoirError as exc:
                log.warning("webhook_locality_failed", pod=pod_name(pod), error=str(exc))
                warnings.append(f"reservoir: no data-locality affinity added: {exc}")
        if asked.fuse_mount:
            patch += self._fuse_patch(pod, asked)
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        if warnings:
            response["warnings"] = warnings
        log.info("webhook_admitted", pod=pod_name(pod), operations=len(patch))
        return web.json_response(
            {
                "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
                "kind": "AdmissionReview",
                "response": response,
            }
        )

    def _fuse_patch(self, pod: Mapping[str, Any], asked: PodRequest) -> list[dict[str, Any]]:
        spec = pod.get("spec") or {}
        volumes = spec.get("volumes") or []
        if any(v.get("name") == FUSE_VOLUME for v in volumes):
            return []  # already there (the webhook was called again)
        host_path = posixpath.join(self._fuse_host_path, asked.fuse_path.lstrip("/"))
        volume = {
            "name": FUSE_VOLUME,
            "hostPath": {"path": host_path.rstrip("/") or "/", "type": "Directory"},
        }
        patch = [_append(spec, "/spec", "volumes", volume)]
        mount = {
            "name": FUSE_VOLUME,
            "mountPath": asked.fuse_mount,
            # The FUSE mount may be made (or remade) after the pod starts: follow it.
            "mountPropagation": "HostToContainer",
        }
        for index, container in enumerate(spec.get("containers") or []):
            patch.append(_append(container, f"/spec/containers/{index}", "volumeMounts", mount))
        return patch


def _request_of(review: Any) -> tuple[str, Mapping[str, Any]]:
    if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
        raise InvalidArgument("expected an AdmissionReview object")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise InvalidArgument("request.uid is missing")
    kind = request.get("kind") or {}
    if kind.get("kind") != "Pod":
        raise InvalidArgument(f"request.kind is {kind.get('kind')!r}, not Pod")
    pod = request.get("object")
    if not isinstance(pod, dict):
        raise InvalidArgument("request.object is missing")
    return request["uid"], pod


def affinity_patch(pod: Mapping[str, Any], terms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adds `terms` to the pod's preferred node affinity, creating what is missing and
    keeping what the pod already prefers."""
    if not terms:
        return []
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity")
    if affinity is None:
        return [
            {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {PREFERRED: terms}}}
        ]
    node_affinity = affinity.get("nodeAffinity")
    if node_affinity is None:
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {PREFERRED: terms}}]
    where = f"/spec/affinity/nodeAffinity/{PREFERRED}"
    if node_affinity.get(PREFERRED) is None:
        return [{"op": "add", "path": where, "value": terms}]
    return [{"op": "add", "path": f"{where}/-", "value": term} for term in terms]


def _append(parent: Mapping[str, Any], path: str, key: str, item: Any) -> dict[str, Any]:
    """A JSONPatch op adding `item` to the list `parent[key]`, made when absent."""
    if parent.get(key) is None:
        return {"op": "add", "path": f"{path}/{key}", "value": [item]}
    return {"op": "add", "path": f"{path}/{key}/-", "value": item}
