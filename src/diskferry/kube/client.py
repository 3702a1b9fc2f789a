"""The Client protocol the reconcilers use, over a cluster's API: their reads and writes as
Kubernetes requests (status through its subresource), their Events as core/v1 Events that
name this operator's instance, created, or patched with a count this instance keeps (as
client-go's event correlator does: an operator may create and patch Events, not read them)."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any, TypeVar

from diskferry.base.errors import DiskferryError
from diskferry.control.clock import Clock
from diskferry.control.errors import AlreadyExistsError
from diskferry.control.resources.core import EVENTS, new_event
from diskferry.control.resources.kinds import KindInfo, Registry
from diskferry.control.resources.model import Resource
from diskferry.control.runtime.client import COMPONENT, kind_of, selector
from diskferry.kube.api import KubeApi

log = logging.getLogger("diskferry.kube")
M = TypeVar("M", bound=Resource)
DEFAULT_NAMESPACE = "default"
EVENT_COUNTS = 4096  # Events whose count an instance keeps, the least recently written forgotten


class KubeClient:
    """get, list, create, update, patch status, delete and events of the registry's kinds, in a
    cluster."""

    def __init__(
        self,
        api: KubeApi,
        registry: Registry,
        *,
        instance: str = "",
        component: str = COMPONENT,
        clock: Clock | None = None,
    ) -> None:
        self.api = api
        self.registry = registry
        self.instance = instance
        self.component = component
        self.clock = clock or Clock()
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._counting = threading.Lock()

    def info(self, model: type[Resource]) -> KindInfo:
        """The kind served with `model`."""
        return kind_of(self.registry, model)

    @staticmethod
    def _where(info: KindInfo, namespace: str | None) -> str | None:
        """The namespace of an object of `info`'s kind, as the embedded store scopes it."""
        return (namespace or DEFAULT_NAMESPACE) if info.namespaced else None

    def get(self, model: type[M], namespace: str | None, name: str) -> M | None:
        """The object, None when there is none."""
        info = self.info(model)
        found = self.api.get(info.api_version, info.kind, self._where(info, namespace), name)
        return None if found is None else model.model_validate(found)

    def list(
        self, model: type[M], namespace: str | None = None, labels: dict[str, str] | None = None
    ) -> list[M]:
        """The objects of the kind (in `namespace`, all when None) carrying all `labels`."""
        info = self.info(model)
        scope = namespace if info.namespaced else None
        items, _ = self.api.list(
            info.api_version, info.kind, scope, label_selector=selector(labels)
        )
        return [model.model_validate(item) for item in items]

    def create(self, obj: M) -> M:
        """Create `obj`; the object stored."""
        info = self.info(type(obj))
        where = self._where(info, obj.metadata.namespace)
        stored = self.api.create(info.api_version, info.kind, where, obj.to_json())
        return type(obj).model_validate(stored)

    def update(self, obj: M) -> M:
        """Replace the object; ConflictError when its resourceVersion is stale."""
        info, meta = self.info(type(obj)), obj.metadata
        where = self._where(info, meta.namespace)
        stored = self.api.replace(
            info.api_version, info.kind, where, meta.name or "", obj.to_json()
        )
        return type(obj).model_validate(stored)

    def patch_status(self, obj: M, status: dict[str, Any]) -> M:
        """Merge-patch the status subresource."""
        info, meta = self.info(type(obj)), obj.metadata
        stored = self.api.patch(
            info.api_version,
            info.kind,
            self._where(info, meta.namespace),
            meta.name or "",
            {"status": status},
            subresource="status",
        )
        return type(obj).model_validate(stored)

    def delete(self, model: type[M], namespace: str | None, name: str) -> None:
        """Delete the object; nothing when it is gone already."""
        info = self.info(model)
        self.api.delete(info.api_version, info.kind, self._where(info, namespace), name)

    def _counted(self, key: str, new: bool) -> int:
        """The count of the Event `key` now: 1 when it is new, else one more than this instance
        last wrote (2 when it wrote none)."""
        with self._counting:
            count = 1 if new else self._counts.pop(key, 1) + 1
            self._counts[key] = count
            while len(self._counts) > EVENT_COUNTS:
                self._counts.popitem(last=False)
        return count

    def event(self, obj: Resource, type_: str, reason: str, message: str) -> None:
        """Record (or bump the count of) an Event about `obj`, naming this instance as its
        reporter; one the API refuses is logged and dropped, as client-go's recorder does."""
        body = new_event(obj.to_json(), type_, reason, message, self.component, self.clock.stamp())
        if self.instance:
            body["reportingInstance"] = self.instance
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        key = f"{namespace}/{name}"
        try:
            try:
                self.api.create(EVENTS.api_version, EVENTS.kind, namespace, body)
                self._counted(key, new=True)
                return
            except AlreadyExistsError:
                pass
            bump = {
                "count": self._counted(key, new=False),
                "lastTimestamp": body["lastTimestamp"],
                "involvedObject": body["involvedObject"],
            }
            if self.instance:
                bump["reportingInstance"] = self.instance
            self.api.patch(EVENTS.api_version, EVENTS.kind, namespace, name, bump)
        except DiskferryError as error:
            log.warning("cannot record the Event %s about %s: %s", reason, name, error)
