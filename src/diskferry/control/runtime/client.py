"""The narrow, typed client reconcilers use, and EmbeddedClient over the daemon's ObjectService.

A cluster shape implements the same protocol over the Kubernetes API; reconcilers see only it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from diskferry.control.errors import NotFoundError
from diskferry.control.resources.kinds import KindInfo, Registry
from diskferry.control.resources.labels import label_selector
from diskferry.control.resources.model import Resource

if TYPE_CHECKING:
    from diskferry.control.apiserver.objects import ObjectService

M = TypeVar("M", bound=Resource)
COMPONENT = "diskferry-controller"


class Client(Protocol):
    """get, list, create, update, patch status, delete, and events, over models."""

    def get(self, model: type[M], namespace: str | None, name: str) -> M | None:
        """The object, None when there is none."""
        ...

    def list(
        self, model: type[M], namespace: str | None = None, labels: dict[str, str] | None = None
    ) -> list[M]:
        """The objects of the kind (in `namespace`, all when None) carrying all `labels`."""
        ...

    def create(self, obj: M) -> M:
        """Create `obj`; the object stored."""
        ...

    def update(self, obj: M) -> M:
        """Replace the object (not its status); ConflictError when `obj` is stale."""
        ...

    def patch_status(self, obj: M, status: dict[str, Any]) -> M:
        """Merge `status` (API names; None removes a field) into the object's status."""
        ...

    def delete(self, model: type[M], namespace: str | None, name: str) -> None:
        """Delete the object; nothing when it is gone already."""
        ...

    def event(self, obj: Resource, type_: str, reason: str, message: str) -> None:
        """Record an Event (Normal or Warning) about `obj`."""
        ...


def kind_of(registry: Registry, model: type[Resource]) -> KindInfo:
    """The kind `registry` serves with `model`."""
    for info in registry.kinds:
        if info.model is model:
            return info
    raise NotFoundError(f"no kind is served with the model {model.__name__}")


def selector(labels: dict[str, str] | None) -> str | None:
    """`labels` as an equality label selector, None when there are none."""
    return label_selector(labels) if labels else None


class EmbeddedClient:
    """The client over the embedded store's ObjectService."""

    def __init__(
        self, objects: ObjectService, registry: Registry, component: str = COMPONENT
    ) -> None:
        self.objects = objects
        self.registry = registry
        self.component = component

    def info(self, model: type[Resource]) -> KindInfo:
        """The kind served with `model`."""
        return kind_of(self.registry, model)

    def get(self, model: type[M], namespace: str | None, name: str) -> M | None:
        """The object, None when there is none."""
        try:
            data = self.objects.get(self.info(model), namespace, name)
        except NotFoundError:
            return None
        return model.model_validate(data)

    def list(
        self, model: type[M], namespace: str | None = None, labels: dict[str, str] | None = None
    ) -> list[M]:
        """The objects of the kind carrying all `labels`."""
        found = self.objects.list(self.info(model), namespace, label_selector=selector(labels))
        return [model.model_validate(item) for item in found.items]

    def create(self, obj: M) -> M:
        """Create `obj`; the object stored."""
        stored, _ = self.objects.create(self.info(type(obj)), obj.metadata.namespace, obj.to_json())
        return type(obj).model_validate(stored)

    def update(self, obj: M) -> M:
        """Replace the object; ConflictError when its resourceVersion is stale."""
        meta = obj.metadata
        stored, _ = self.objects.update(
            self.info(type(obj)), meta.namespace, meta.name, obj.to_json()
        )
        return type(obj).model_validate(stored)

    def patch_status(self, obj: M, status: dict[str, Any]) -> M:
        """Merge-patch the status subresource."""
        meta = obj.metadata
        stored, _ = self.objects.patch(
            self.info(type(obj)),
            meta.namespace,
            meta.name,
            {"status": status},
            "merge",
            subresource="status",
        )
        return type(obj).model_validate(stored)

    def delete(self, model: type[M], namespace: str | None, name: str) -> None:
        """Delete the object; nothing when it is gone already."""
        try:
            self.objects.delete(self.info(model), namespace, name)
        except NotFoundError:
            return

    def event(self, obj: Resource, type_: str, reason: str, message: str) -> None:
        """Record (or bump the count of) an Event about `obj`."""
        self.objects.record_event(obj.to_json(), type_, reason, message, self.component)
