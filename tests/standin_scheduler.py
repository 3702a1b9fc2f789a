"""The stand-in cluster's scheduler: it binds each Pod to one of the stand-in's nodes, as
kube-scheduler does, so that a Pod runs where its claims' volumes are.

- The nodes are names the stand-in is started with (`--nodes`), each a Node labelled
  `kubernetes.io/hostname: <name>`; they all run on this host, under the one stand-in kubelet.
- A Pod without `spec.nodeName` gets the first node (by name) that its `nodeSelector` and each
  of its claims allow: a bound claim's volume by its `nodeAffinity`; an unbound claim of a
  class bound WaitForFirstConsumer by the class's `allowedTopologies` (the node chosen is then
  written on the claim as `volume.kubernetes.io/selected-node`, where the storage provisions
  its volume); an unbound claim of an Immediate class is waited for.
- A Pod no node can take stays Pending, its PodScheduled condition False, Unschedulable, saying
  why as kube-scheduler says it ("0/2 nodes are available: 2 node(s) had volume node affinity
  conflict."); it is tried again at each sync.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from standin_loop import Loop, kind
from standin_storage import HOSTNAME, MERGE, SELECTED_NODE, wait_for_consumer

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.errors import ApiError, NotFoundError

log = logging.getLogger("standin.scheduler")
DEFAULT_NODE = "standin"
UNSCHEDULABLE = "Unschedulable"
Obj = dict[str, Any]


def node_labels(node: str) -> dict[str, str]:
    """The labels of the stand-in's node `node`."""
    return {HOSTNAME: node}


def _matches(expression: Obj, labels: Mapping[str, str]) -> bool:
    """Whether `labels` satisfy one of a node selector's matchExpressions."""
    key, operator = expression.get("key"), expression.get("operator")
    values = expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def volume_allows(pv: Obj, node: str) -> bool:
    """Whether the volume's nodeAffinity lets it be used on `node` (one without any does)."""
    terms = ((((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")) or {}).get(
        "nodeSelectorTerms"
    )
    if not terms:
        return True
    labels = node_labels(node)
    return any(
        all(_matches(e, labels) for e in term.get("matchExpressions") or []) for term in terms
    )


def topology_allows(storage_class: Obj, node: str) -> bool:
    """Whether the class's allowedTopologies let it make a volume on `node` (none: anywhere)."""
    terms = storage_class.get("allowedTopologies")
    if not terms:
        return True
    labels = node_labels(node)
    return any(
        all(labels.get(e["key"]) in e.get("values", []) for e in term["matchLabelExpressions"])
        for term in terms
    )


class Unschedulable(Exception):
    """No node can take the Pod now, for the reason given."""


class Scheduler:
    """Binds the stand-in's Pods to its `nodes`."""

    def __init__(self, service: ObjectService, nodes: Iterable[str]) -> None:
        self.service = service
        self.nodes = sorted(nodes)
        self.pods = kind(service, "Pod")
        self.claims = kind(service, "PersistentVolumeClaim")
        self.volumes = kind(service, "PersistentVolume")
        self.classes = kind(service, "StorageClass", "storage.k8s.io")
        self.loop = Loop(service, "standin-scheduler", self.sync, period=0.5)

    def start(self) -> None:
        """Begin binding Pods."""
        self.loop.start()

    def stop(self) -> None:
        """Stop binding Pods."""
        self.loop.stop()

    def sync(self) -> None:
        """Bind every Pod that has no node yet, or say why it cannot be."""
        for pod in self.service.list(self.pods, None).items:
            ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp") or ended:
                continue
            try:
                self._schedule(pod)
            except ApiError as e:  # changed meanwhile: the next sync takes it as it is then
                log.info("pod %s: %s", pod["metadata"]["name"], e.message)

    def _feasible(self, pod: Obj) -> tuple[list[str], list[Obj]]:
        """The nodes that can take the Pod, and its claims waiting for their first consumer;
        Unschedulable when it must wait, or when no node can take it."""
        meta, spec = pod["metadata"], pod["spec"]
        selector = spec.get("nodeSelector") or {}
        nodes = [n for n in self.nodes if selector.items() <= node_labels(n).items()]
        if not nodes:
            raise Unschedulable(
                f"0/{len(self.nodes)} nodes are available: {len(self.nodes)} node(s) didn't "
                "match Pod's node affinity/selector."
            )
        waiting = []
        for volume in spec.get("volumes") or []:
            name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if not name:
                continue
            try:
                pvc = self.service.get(self.claims, meta["namespace"], name)
            except NotFoundError:
                raise Unschedulable(f'persistentvolumeclaim "{name}" not found') from None
            bound = pvc["spec"].get("volumeName")
            if bound:
                pv = self.service.get(self.volumes, None, bound)
                allowed = [n for n in nodes if volume_allows(pv, n)]
                why = "volume node affinity conflict"
            elif (pvc["metadata"].get("annotations") or {}).get(SELECTED_NODE):
                chosen = pvc["metadata"]["annotations"][SELECTED_NODE]
                allowed, why = [n for n in nodes if n == chosen], "volume node affinity conflict"
            else:
                storage_class = self._class(pvc)
                if storage_class is None or not wait_for_consumer(storage_class):
                    raise Unschedulable("pod has unbound immediate PersistentVolumeClaims.")
                allowed = [n for n in nodes if topology_allows(storage_class, n)]
                why = "didn't find available persistent volumes to bind"
                waiting.append(pvc)
            if not allowed:
                others = len(self.nodes)
                raise Unschedulable(f"0/{others} nodes are available: {others} node(s) had {why}.")
            nodes = allowed
        return nodes, waiting

    def _class(self, pvc: Obj) -> Obj | None:
        try:
            return self.service.get(self.classes, None, pvc["spec"].get("storageClassName") or "")
        except NotFoundError:
            return None

    def _schedule(self, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            nodes, waiting = self._feasible(pod)
        except Unschedulable as e:
            self._condition(pod, "False", UNSCHEDULABLE, str(e))
            return
        node = nodes[0]
        for pvc in waiting:
            annotations = {SELECTED_NODE: node}
            self.service.patch(
                self.claims,
                pvc["metadata"]["namespace"],
                pvc["metadata"]["name"],
                {"metadata": {"annotations": annotations}},
                MERGE,
            )
        self.service.patch(
            self.pods, meta["namespace"], meta["name"], {"spec": {"nodeName": node}}, MERGE
        )
        self._condition(pod, "True", None, None)
        log.info("pod %s/%s bound to %s", meta["namespace"], meta["name"], node)

    def _condition(self, pod: Obj, status: str, reason: str | None, message: str | None) -> None:
        """Set the Pod's PodScheduled condition, when it says something new."""
        found = next(
            (
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "PodScheduled"
            ),
            {},
        )
        if (found.get("status"), found.get("reason"), found.get("message")) == (
            status,
            reason,
            message,
        ):
            return
        condition = {"type": "PodScheduled", "status": status}
        if reason:
            condition.update(reason=reason, message=message)
        others = [
            c
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") != "PodScheduled"
        ]
        status_patch: Obj = {"conditions": [*others, condition]}
        if reason:
            status_patch["phase"] = "Pending"
        meta = pod["metadata"]
        self.service.patch(
            self.pods,
            meta["namespace"],
            meta["name"],
            {"status": status_patch},
            MERGE,
            subresource="status",
        )
