"""The finalizer that holds a resource until its claim and its worker's files are removed."""

from __future__ import annotations

from typing import TypeVar

from diskferry.control.model import Resource
from diskferry.control.runtime.client import Client

M = TypeVar("M", bound=Resource)
FINALIZER = "diskferry.io/cleanup"


def held(client: Client, obj: M) -> M:
    """The object with the finalizer added (written once)."""
    if FINALIZER in obj.metadata.finalizers:
        return obj
    meta = obj.metadata.model_copy(update={"finalizers": [*obj.metadata.finalizers, FINALIZER]})
    return client.update(obj.model_copy(update={"metadata": meta}))


def release(client: Client, obj: Resource) -> None:
    """Remove the finalizer: the store deletes the object once no finalizer is left."""
    if FINALIZER not in obj.metadata.finalizers:
        return
    left = [f for f in obj.metadata.finalizers if f != FINALIZER]
    client.update(
        obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"finalizers": left})})
    )


def deleting(obj: Resource) -> bool:
    """Whether the object is being deleted."""
    return obj.metadata.deletion_timestamp is not None
