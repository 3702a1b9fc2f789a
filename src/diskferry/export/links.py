"""The links of an export in the shape of KubeVirt's VirtualMachineExportStatus."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diskferry.export.volumes import ExportedVolume


@dataclass(frozen=True)
class LinkedVolume:
    """What a volume's links tell of it: its name, and whether it is a disk, a directory of
    files, or both."""

    name: str
    disk: bool
    directory: bool = False


def linked(volumes: Sequence[ExportedVolume]) -> list[LinkedVolume]:
    """What the links tell of each of the opened `volumes`."""
    return [LinkedVolume(v.name, v.disk is not None, v.directory is not None) for v in volumes]


def _formats(base: str, vol: LinkedVolume) -> list[dict[str, str]]:
    prefix = f"{base}/volumes/{vol.name}"
    formats = []
    if vol.disk:
        formats += [
            {"format": "raw", "url": f"{prefix}/disk.img"},
            {"format": "gzip", "url": f"{prefix}/disk.img.gz"},
            {"format": "zstd", "url": f"{prefix}/disk.img.zst"},
        ]
    if vol.directory:
        formats += [
            {"format": "dir", "url": f"{prefix}/dir/"},
            {"format": "tar.gz", "url": f"{prefix}/disk.tar.gz"},
        ]
    return formats


def backup_link(base: str, name: str) -> dict[str, Any]:
    """The map and data endpoints of the volume `name` of a backup point under `base`."""
    base = base.rstrip("/")
    return {
        "name": name,
        "endpoints": [
            {"endpoint": "map", "url": f"{base}/exports/{name}/map"},
            {"endpoint": "data", "url": f"{base}/exports/{name}/data"},
        ],
    }


def manifest_links(base: str, kind: str, has_manifest: bool) -> list[dict[str, str]]:
    """The manifests served on the side `kind` (internal or external) under `base`: the VM's
    (`all`) when there is one, and the header Secret."""
    base = base.rstrip("/")
    manifests = [{"type": "auth-header-secret", "url": f"{base}/{kind}/manifests/secret"}]
    if has_manifest:
        manifests.insert(0, {"type": "all", "url": f"{base}/{kind}/manifests/all"})
    return manifests


def link_set(
    base: str, kind: str, ca_pem: str | None, volumes: Sequence[LinkedVolume], has_manifest: bool
) -> dict[str, Any]:
    """One link set (`kind` is internal or external) under the base URL `base`."""
    base = base.rstrip("/")
    return {
        "cert": ca_pem,
        "volumes": [{"name": v.name, "formats": _formats(base, v)} for v in volumes],
        "manifests": manifest_links(base, kind, has_manifest),
        "backups": [backup_link(base, v.name) for v in volumes if v.disk],
    }


def export_links(
    internal_url: str,
    external_url: str,
    internal_ca: str,
    external_ca: str,
    volumes: Sequence[LinkedVolume],
    has_manifest: bool,
) -> dict[str, Any]:
    """The `internal` and `external` link sets, each with the CA its clients should trust."""
    return {
        "internal": link_set(internal_url, "internal", internal_ca, volumes, has_manifest),
        "external": link_set(external_url, "external", external_ca, volumes, has_manifest),
    }
