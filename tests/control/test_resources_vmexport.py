"""The VirtualMachineExport model against KubeVirt's type: `spec.source` as KubeVirt writes it
(each kind with its API group), diskferry's own kinds, and `status.links.*.backups`."""

from __future__ import annotations

from typing import Any

import pytest
from test_crd import errors
from test_resources import refusal

from diskferry.control.resources.vmexport import ExportSourceKind, VirtualMachineExport

EXPORT = {
    "apiVersion": "diskferry.io/v1alpha1",
    "kind": "VirtualMachineExport",
    "metadata": {"name": "ex1", "namespace": "default"},
}


def export(source: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    """ex1 exporting `source`, with `status`."""
    return {**EXPORT, "spec": {"source": source}, "status": status or {}}


KUBEVIRT_SOURCES = [
    ({"apiGroup": "kubevirt.io", "kind": "VirtualMachine"}, "VirtualMachine"),
    ({"apiGroup": "", "kind": "PersistentVolumeClaim"}, "PersistentVolumeClaim"),
    ({"kind": "PersistentVolumeClaim"}, "PersistentVolumeClaim"),
    (
        {"apiGroup": "snapshot.kubevirt.io", "kind": "VirtualMachineSnapshot"},
        "VirtualMachineSnapshot",
    ),
    ({"apiGroup": "backup.kubevirt.io", "kind": "VirtualMachineBackup"}, "VirtualMachineBackup"),
    (
        {"apiGroup": "template.kubevirt.io", "kind": "VirtualMachineTemplate"},
        "VirtualMachineTemplate",
    ),
    ({"apiGroup": "diskferry.io", "kind": "VirtualDisk"}, "VirtualDisk"),
    ({"kind": "VirtualDiskSnapshot"}, "VirtualDiskSnapshot"),
    ({"apiGroup": "diskferry.io", "kind": "VirtualMachine"}, "VirtualMachine"),
    ({"kind": "VirtualMachine"}, "VirtualMachine"),
    ({"apiGroup": "diskferry.io", "kind": "VirtualMachineBackup"}, "VirtualMachineBackup"),
]


@pytest.mark.parametrize(("source", "kind"), KUBEVIRT_SOURCES)
def test_each_source_kubevirt_or_diskferry_writes_is_taken(
    source: dict[str, str], kind: str
) -> None:
    doc = export({**source, "name": "src"})
    parsed = VirtualMachineExport.model_validate(doc)
    assert parsed.spec.source.kind is ExportSourceKind(kind)
    assert parsed.to_json()["spec"]["source"] == {**source, "name": "src"}
    assert errors("VirtualMachineExport", doc) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            {"apiGroup": "diskferry.io", "kind": "PersistentVolumeClaim"},
            'a PersistentVolumeClaim\'s apiGroup is "" or unset',
        ),
        (
            {"apiGroup": "kubevirt.io", "kind": "VirtualDisk"},
            "a VirtualDisk's apiGroup is diskferry.io or unset",
        ),
        (
            {"kind": "VirtualMachineSnapshot"},
            "a VirtualMachineSnapshot's apiGroup is snapshot.kubevirt.io",
        ),
        (
            {"apiGroup": "snapshot.kubevirt.io", "kind": "VirtualMachine"},
            "a VirtualMachine's apiGroup is kubevirt.io, diskferry.io or unset",
        ),
        ({"apiGroup": "cdi.kubevirt.io", "kind": "DataVolume"}, "spec.source.kind"),
    ],
)
def test_a_group_that_does_not_go_with_the_kind_is_refused(
    source: dict[str, str], expected: str
) -> None:
    doc = export({**source, "name": "src"})
    assert expected in refusal(doc)
    assert errors("VirtualMachineExport", doc)


def test_the_links_carry_kubevirts_backups() -> None:
    endpoints = [
        {"endpoint": "map", "url": "https://h/exports/vd/map"},
        {"endpoint": "data", "url": "https://h/exports/vd/data"},
    ]
    link = {"cert": "PEM", "backups": [{"name": "vd", "endpoints": endpoints}]}
    doc = export(
        {"apiGroup": "backup.kubevirt.io", "kind": "VirtualMachineBackup", "name": "b1"},
        {"phase": "Ready", "links": {"internal": link, "external": link}},
    )
    parsed = VirtualMachineExport.model_validate(doc)
    external = parsed.to_json()["status"]["links"]["external"]
    assert (external["cert"], external["backups"]) == ("PEM", link["backups"])
    assert errors("VirtualMachineExport", doc) == []
