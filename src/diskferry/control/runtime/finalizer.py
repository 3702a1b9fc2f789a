"""The finalizer that holds a resource until what it made (its claim, its worker and the
worker's files) is removed; a kind may hold by a finalizer of its own name, and a disk or an
image by one more while a VirtualMachine holds it (see `protection`)."""

from __future__ import annotations

from typing import TypeVar

from diskferry.control.resources.model import Resource
from diskferry.control.runtime.client import Client

M = TypeVar("M", bound=Resource)
FINALIZER = "diskferry.io/cleanup"


def held(client: Client, obj: M, finalizer: str = FINALIZER) -> M:
    """The object with `finalizer` added (written once)."""
    if finalizer in obj.metadata.finalizers:
        return obj
    meta = obj.metadata.model_copy(update={"finalizers": [*obj.metadata.finalizers, finalizer]})
    return client.update(obj.model_copy(update={"metadata": meta}))


def release(client: Client, obj: M, finalizer: str = FINALIZER) -> M:
    """The object without `finalizer` (written once): the store deletes an object being
    deleted once no finalizer is left."""
    if finalizer not in obj.metadata.finalizers:
        return obj
    left = [f for f in obj.metadata.finalizers if f != finalizer]
    return client.update(
        obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"finalizers": left})})
    )


def deleting(obj: Resource) -> bool:
    """Whether the object is being deleted."""
    return obj.metadata.deletion_timestamp is not None
