"""The links of an export in the shape of KubeVirt's VirtualMachineExportStatus."""

from __future__ import annotations

from typing import Any

from diskferry.export.volumes import ExportedVolume


def _formats(base: str, vol: ExportedVolume) -> list[dict[str, str]]:
    prefix = f"{base}/volumes/{vol.name}"
    formats = []
    if vol.disk is not None:
        formats += [
            {"format": "raw", "url": f"{prefix}/disk.img"},
            {"format": "gzip", "url": f"{prefix}/disk.img.gz"},
            {"format": "zstd", "url": f"{prefix}/disk.img.zst"},
        ]
    if vol.directory is not None:
        formats += [
            {"format": "dir", "url": f"{prefix}/dir/"},
            {"format": "tar.gz", "url": f"{prefix}/disk.tar.gz"},
        ]
    return formats


def link_set(
    base: str, kind: str, ca_pem: str, volumes: list[ExportedVolume], has_manifest: bool
) -> dict[str, Any]:
    """One link set (`kind` is internal or external) under the base URL `base`."""
    base = base.rstrip("/")
    manifests = [{"type": "auth-header-secret", "url": f"{base}/{kind}/manifests/secret"}]
    if has_manifest:
        manifests.insert(0, {"type": "all", "url": f"{base}/{kind}/manifests/all"})
    disks = [v for v in volumes if v.disk is not None]
    return {
        "cert": ca_pem,
        "volumes": [{"name": v.name, "formats": _formats(base, v)} for v in volumes],
        "manifests": manifests,
        "backups": [
            {
                "name": v.name,
                "endpoints": [
                    {"endpoint": "map", "url": f"{base}/exports/{v.name}/map"},
                    {"endpoint": "data", "url": f"{base}/exports/{v.name}/data"},
                ],
            }
            for v in disks
        ],
    }


def export_links(
    internal_url: str,
    external_url: str,
    internal_ca: str,
    external_ca: str,
    volumes: list[ExportedVolume],
    has_manifest: bool,
) -> dict[str, Any]:
    """The `internal` and `external` link sets, each with the CA its clients should trust."""
    return {
        "internal": link_set(internal_url, "internal", internal_ca, volumes, has_manifest),
        "external": link_set(external_url, "external", external_ca, volumes, has_manifest),
    }
