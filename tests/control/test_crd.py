"""The CRDs made from the models: valid CRDs whose schemas take the examples and refuse bad ones."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from crd_support import schema_errors

from diskferry.control.apiserver.crd import crd, crds, crds_yaml, openapi_schema
from diskferry.control.resources.model import GROUP
from diskferry.control.resources.registry import REGISTRY

KUBERNETES = "1.32"
CUSTOM = {info.kind for info in REGISTRY.kinds if info.group == GROUP}
JUNCTORS = ("anyOf", "allOf", "oneOf", "not")


def _value_only(node: dict[str, Any], where: str) -> None:
    """A schema under a junctor holds value validations only, as structural schemas want."""
    for key in ("type", "default", "description", "additionalProperties", "nullable"):
        assert key not in node, f"{where}: {key} under a junctor"
    for name, child in node.get("properties", {}).items():
        _value_only(child, f"{where}.{name}")


def structural(node: dict[str, Any], where: str = "") -> None:
    """Fail unless `node` is a structural schema: a type everywhere, nothing unresolved."""
    assert not node.keys() & {"$ref", "$defs", "title", "const"}, where
    if "x-kubernetes-int-or-string" in node:
        assert [branch["type"] for branch in node["anyOf"]] == ["integer", "string"], where
        return
    if "x-kubernetes-preserve-unknown-fields" not in node:
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, (
            where
        )
    if "properties" in node:
        assert node["type"] == "object" and "additionalProperties" not in node, where
    for junctor in JUNCTORS:
        for branch in node.get(junctor, []):
            _value_only(branch, f"{where}.{junctor}")
    for name, child in node.get("properties", {}).items():
        structural(child, f"{where}.{name}")
    if "items" in node:
        structural(node["items"], f"{where}[]")
    if isinstance(node.get("additionalProperties"), dict):
        structural(node["additionalProperties"], f"{where}{{}}")


def errors(kind: str, doc: dict[str, Any]) -> list[str]:
    """Where the strict CRD schema of `kind` finds `doc` wrong, as `path: message` lines."""
    return schema_errors(openapi_schema(REGISTRY.by_kind(kind)), doc)


def test_a_crd_for_every_custom_kind() -> None:
    made = crds(REGISTRY)
    assert (
        {c["spec"]["names"]["kind"] for c in made}
        == CUSTOM
        == {
            "VirtualDisk",
            "VirtualImage",
            "ClusterVirtualImage",
            "VirtualDiskSnapshot",
            "VirtualMachineExport",
            "VirtualDataExport",
            "VirtualMachine",
            "VirtualMachineClass",
            "DataMoverConfig",
            "BackupStorageLocation",
            "DataUpload",
            "DataDownload",
            "Backup",
            "Restore",
            "Schedule",
            "VirtualMachineBackupTracker",
            "VirtualMachineBackup",
        }
    )
    assert [c for c in yaml.safe_load_all(crds_yaml(made))] == made


@pytest.mark.parametrize("kind", sorted(CUSTOM))
def test_crd_is_a_valid_structural_custom_resource_definition(kind: str) -> None:
    made = crd(REGISTRY.by_kind(kind))
    kubernetes_validate.validate(made, KUBERNETES, strict=True)
    version = made["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    structural(schema)
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert "spec" in schema["required"]
    assert version["subresources"] == {"status": {}}
    jsonschema.Draft202012Validator.check_schema(schema)


def test_print_columns_names_and_scope() -> None:
    disk = crd(REGISTRY.by_kind("VirtualDisk"))
    assert disk["metadata"]["name"] == "virtualdisks.diskferry.io"
    assert disk["spec"]["names"]["shortNames"] == ["vd"]
    assert disk["spec"]["scope"] == "Namespaced"
    columns = disk["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == [
        "Phase",
        "Capacity",
        "InUse",
        "VirtualMachine",
        "Progress",
        "StorageClass",
        "TargetPVC",
        "Age",
    ]
    assert columns[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    assert columns[2]["jsonPath"] == ".status.conditions[?(@.type=='InUse')].status"
    export = crd(REGISTRY.lookup("vmexport"))
    assert export["spec"]["names"]["shortNames"] == ["vmexport", "vmexports"]
    assert export["spec"]["names"]["plural"] == "virtualmachineexports"
    assert [c["jsonPath"] for c in export["spec"]["versions"][0]["additionalPrinterColumns"]] == [
        ".spec.source.kind",
        ".spec.source.name",
        ".status.phase",
    ]
    backup = crd(REGISTRY.lookup("vmbackup"))
    assert backup["spec"]["names"]["kind"] == "VirtualMachineBackup"
    assert backup["spec"]["scope"] == "Namespaced"
    tracker = crd(REGISTRY.lookup("vmbackuptracker"))
    assert tracker["spec"]["names"]["plural"] == "virtualmachinebackuptrackers"
    assert tracker["spec"]["scope"] == "Namespaced"
    assert crd(REGISTRY.lookup("cvi"))["spec"]["scope"] == "Cluster"
    assert crd(REGISTRY.lookup("vds"))["spec"]["names"]["shortNames"] == ["vdsnapshot", "vds"]


def test_selectable_fields_are_the_kinds_field_selectors() -> None:
    disk = crd(REGISTRY.by_kind("VirtualDisk"))["spec"]["versions"][0]
    assert disk["selectableFields"] == [{"jsonPath": ".status.phase"}]


def test_quantities_are_int_or_string() -> None:
    spec = openapi_schema(REGISTRY.by_kind("VirtualDisk"))["properties"]["spec"]
    size = spec["properties"]["persistentVolumeClaim"]["properties"]["size"]
    assert size["x-kubernetes-int-or-string"] is True


def test_examples_validate_against_the_schemas(example: dict[str, Any]) -> None:
    if example["kind"] in CUSTOM:
        assert errors(example["kind"], example) == []
    else:
        kubernetes_validate.validate(example, KUBERNETES, strict=True)


VD1 = {
    "apiVersion": "diskferry.io/v1alpha1",
    "kind": "VirtualDisk",
    "metadata": {"name": "vd1", "namespace": "default"},
    "spec": {
        "persistentVolumeClaim": {"size": "64Mi"},
        "dataSource": {"type": "HTTP", "http": {"url": "https://example.org/disk.qcow2"}},
    },
}


def _with(path: str, value: Any) -> dict[str, Any]:
    """vd1 with the field at `path` set to `value`, or removed when it is None."""
    doc = copy.deepcopy(VD1)
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        node = node[part]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("spec.persistentVolumeClaim.color", "red", "spec.persistentVolumeClaim: Additional"),
        ("spec.persistentVolumeClaim.size", "64Mb", "spec.persistentVolumeClaim.size: '64Mb'"),
        ("spec.persistentVolumeClaim.size", 1.5, "spec.persistentVolumeClaim.size: 1.5"),
        ("spec.dataSource.type", "FTP", "spec.dataSource.type: 'FTP' is not one of"),
        ("spec.dataSource.http", None, "spec.dataSource: {'type': 'HTTP'} is not valid"),
        ("spec.dataSource.http.checksum", {"sha1": "ab"}, "spec.dataSource.http.checksum.sha1"),
    ],
)
def test_the_schemas_refuse_bad_manifests(path: str, value: Any, expected: str) -> None:
    found = errors("VirtualDisk", _with(path, value))
    assert any(line.startswith(expected) for line in found), found


def test_the_cli_prints_the_crds(diskferry) -> None:
    every = diskferry("crds")
    assert every.code == 0, every.stderr
    assert list(yaml.safe_load_all(every.stdout)) == crds(REGISTRY)
    one = diskferry("crds", "vd", "vmexport")
    assert [c["metadata"]["name"] for c in yaml.safe_load_all(one.stdout)] == [
        "virtualdisks.diskferry.io",
        "virtualmachineexports.diskferry.io",
    ]
    builtin = diskferry("crds", "sc")
    assert builtin.code == 2
    assert "StorageClass is built in" in builtin.stderr
