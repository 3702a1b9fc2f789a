"""Objects of kinds this package does not import (VirtualMachine, DataMoverConfig) read as plain
dicts through the client's registry; None when the kind is not served."""

from __future__ import annotations

from typing import Any

from diskferry.control.errors import NotFoundError
from diskferry.control.runtime.client import Client


def get_plain(client: Client, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
    """The object as API values, None when it or its kind does not exist."""
    registry = getattr(client, "registry", None)
    if registry is None:
        return None
    try:
        info = registry.by_kind(kind)
    except NotFoundError:
        return None
    obj = client.get(info.model, namespace, name)
    return None if obj is None else obj.to_json()
