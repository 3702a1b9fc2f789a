"""Discovery: `/api`, `/apis`, each group-version's resources, aggregated discovery, `/version`."""

from __future__ import annotations

import platform
from typing import Any

from diskferry import __version__
from diskferry.control.errors import NotFoundError
from diskferry.control.resources.kinds import KUBE_MINOR, KindInfo, Registry

STATUS_VERBS = ["get", "patch", "update"]


def version_info() -> dict[str, str]:
    """What `/version` answers: the Kubernetes API level served, and diskferry's version."""
    return {
        "major": "1",
        "minor": KUBE_MINOR,
        "gitVersion": f"v1.{KUBE_MINOR}.0+diskferry-{__version__}",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": f"python{platform.python_version()}",
        "compiler": "cpython",
        "platform": f"{platform.system().lower()}/{platform.machine()}",
    }


def _groups(registry: Registry) -> dict[str, list[str]]:
    """The named groups (not the core one) and their versions."""
    out: dict[str, list[str]] = {}
    for info in registry.kinds:
        if info.group and info.version not in out.setdefault(info.group, []):
            out[info.group].append(info.version)
    return out


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def api_versions(server_address: str) -> dict[str, Any]:
    """`/api`: the core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def api_group_list(registry: Registry) -> dict[str, Any]:
    """`/apis`: every named group."""
    groups = [_group(name, versions) for name, versions in _groups(registry).items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> dict[str, Any]:
    """`/apis/<group>`: one group's versions."""
    versions = _groups(registry).get(group)
    if not versions:
        raise NotFoundError(f"the server could not find the requested resource {group}")
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)}


def _kinds(registry: Registry, group: str, version: str) -> list[KindInfo]:
    kinds = [i for i in registry.kinds if (i.group, i.version) == (group, version)]
    if not kinds:
        where = f"{group}/{version}" if group else version
        raise NotFoundError(f"the server could not find the requested resource {where}")
    return kinds


def _resource(info: KindInfo) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": info.plural,
        "singularName": info.singular,
        "namespaced": info.namespaced,
        "kind": info.kind,
        "verbs": list(info.verbs),
    }
    if info.short_names:
        out["shortNames"] = list(info.short_names)
    if info.categories:
        out["categories"] = list(info.categories)
    return out


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any]:
    """`/apis/<group>/<version>` (or `/api/v1`): the resources and subresources served."""
    resources = []
    for info in _kinds(registry, group, version):
        resources.append(_resource(info))
        if info.has_status:
            resources.append(
                {
                    "name": f"{info.plural}/status",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": STATUS_VERBS,
                }
            )
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def _discovered(info: KindInfo) -> dict[str, Any]:
    kind = {"group": info.group, "version": info.version, "kind": info.kind}
    out: dict[str, Any] = {
        "resource": info.plural,
        "responseKind": kind,
        "scope": "Namespaced" if info.namespaced else "Cluster",
        "singularResource": info.singular,
        "verbs": list(info.verbs),
    }
    if info.short_names:
        out["shortNames"] = list(info.short_names)
    if info.categories:
        out["categories"] = list(info.categories)
    if info.has_status:
        out["subresources"] = [
            {"subresource": "status", "responseKind": kind, "verbs": STATUS_VERBS}
        ]
    return out


def aggregated(registry: Registry, core: bool) -> dict[str, Any]:
    """`apidiscovery.k8s.io/v2` of the core group (`/api`) or of the named groups (`/apis`)."""
    groups = {"": ["v1"]} if core else _groups(registry)
    items = []
    for name, versions in groups.items():
        listed = [
            {
                "version": v,
                "resources": [_discovered(i) for i in _kinds(registry, name, v)],
                "freshness": "Current",
            }
            for v in versions
        ]
        metadata = (
            {"name": name, "creationTimestamp": None} if name else {"creationTimestamp": None}
        )
        items.append({"metadata": metadata, "versions": listed})
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }
