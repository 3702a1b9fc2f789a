"""A resource path's parts: the kind, the namespace, the name and the subresource it names."""

from __future__ import annotations

from dataclasses import dataclass

from diskferry.control.errors import NotFoundError
from diskferry.control.resources.kinds import KindInfo, Registry

SUBRESOURCES = ("status",)


@dataclass(frozen=True)
class Target:
    """What a request under `/api/v1` or `/apis/<group>/<version>` is about."""

    info: KindInfo
    namespace: str | None
    name: str | None = None
    subresource: str | None = None


def _missing(path: str) -> NotFoundError:
    return NotFoundError(f"the server could not find the requested resource ({path})")


def _namespaced(registry: Registry, group: str, version: str, plural: str) -> KindInfo | None:
    try:
        info = registry.by_plural(group, version, plural)
    except NotFoundError:
        return None
    return info if info.namespaced else None


def resolve(registry: Registry, group: str, version: str, path: str) -> Target:
    """The target of `path` (what follows the group-version); NotFoundError for any other."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "namespaces":
        info = _namespaced(registry, group, version, parts[2])
        if info is not None:
            return _target(info, parts[1], parts[3:], path)
    if not parts:
        raise _missing(path)
    info = registry.by_plural(group, version, parts[0])
    if info.namespaced and len(parts) > 1:
        raise _missing(path)
    return _target(info, None, parts[1:], path)


def _target(info: KindInfo, namespace: str | None, rest: list[str], path: str) -> Target:
    if not rest:
        return Target(info, namespace)
    if len(rest) == 1:
        return Target(info, namespace, rest[0])
    if len(rest) == 2 and rest[1] in SUBRESOURCES and info.has_status:
        return Target(info, namespace, rest[0], rest[1])
    raise _missing(path)
