"""The cluster's kinds whose objects the operator makes for its resources, followed so that a
change of one queues the resource that owns it (the manager's `owned` kinds): the worker Pods
the runner starts and the PVCs of claims, each listed and watched through the labels the
operator gives them, so that the cluster's other Pods and claims are never read."""

from __future__ import annotations

from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.model import Resource
from diskferry.control.runtime.client import selector
from diskferry.kube.pods import WORKERS
from diskferry.kube.volumes import MANAGED

OWNED = (
    KindInfo("", "v1", "Pod", "pods", Resource),
    KindInfo("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", Resource),
)
"""The kinds followed for their owners, as the manager and the source need to know them."""
SELECTORS = {"Pod": selector(WORKERS), "PersistentVolumeClaim": selector(MANAGED)}
"""Of each owned kind, the label selector of the objects the operator made."""
