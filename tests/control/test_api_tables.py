"""Print columns: the JSONPath subset they use, ages as kubectl writes them, Table rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from diskferry.control.apiserver.http.jsonpath import JsonPathError, evaluate
from diskferry.control.apiserver.http.tables import human_duration, table
from diskferry.control.resources.storageclass import STORAGE_CLASSES
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS

OBJ = {
    "metadata": {"name": "vd1", "annotations": {"a.example.io/is-default": "true"}},
    "status": {
        "phase": "Ready",
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "InUse", "status": "False"},
        ],
        "attachedToVirtualMachines": [
            {"name": "vm1", "mounted": False},
            {"name": "vm2", "mounted": True},
        ],
    },
}


@pytest.mark.parametrize(
    ("path", "values"),
    [
        (".status.phase", ["Ready"]),
        ("{.status.phase}", ["Ready"]),
        (".status.conditions[?(@.type=='InUse')].status", ["False"]),
        ('.status.conditions[?(@.type=="Ready")].status', ["True"]),
        (".status.attachedToVirtualMachines[0].name", ["vm1"]),
        (".status.attachedToVirtualMachines[-1].name", ["vm2"]),
        (".status.attachedToVirtualMachines[*].name", ["vm1", "vm2"]),
        (".status.attachedToVirtualMachines[5].name", []),
        (".status.attachedToVirtualMachines[?(@.mounted==true)].name", ["vm2"]),
        (".status.attachedToVirtualMachines[?(@.mounted==false)].name", ["vm1"]),
        (".status.attachedToVirtualMachines[?(@.mounted=='true')].name", []),
        (".status.conditions[?(@.status==true)].type", []),
        (".status.missing.deeper", []),
        (".metadata.annotations.a\\.example\\.io\\/is-default", ["true"]),
    ],
)
def test_jsonpath(path: str, values: list[str]) -> None:
    assert evaluate(path, OBJ) == values


def test_jsonpath_outside_the_subset_is_an_error() -> None:
    with pytest.raises(JsonPathError):
        evaluate(".status..phase", OBJ)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (59, "59s"),
        (119, "119s"),
        (200, "3m20s"),
        (300, "5m"),
        (3000, "50m"),
        (4 * 3600 + 60 * 7, "4h7m"),
        (20 * 3600, "20h"),
        (3 * 86400 + 5 * 3600, "3d5h"),
        (100 * 86400, "100d"),
        (3 * 365 * 86400 + 86400, "3y1d"),
        (10 * 365 * 86400, "10y"),
    ],
)
def test_human_duration(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_table_cells_and_missing_values() -> None:
    created = (datetime.now(UTC) - timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    obj = {**OBJ, "metadata": {"name": "vd1", "creationTimestamp": created}}
    answer = table(VIRTUAL_DISKS, [obj], include_object="None")
    names = [c["name"] for c in answer["columnDefinitions"]]
    cells = dict(zip(names, answer["rows"][0]["cells"], strict=True))
    assert cells["Name"] == "vd1" and cells["Phase"] == "Ready"
    assert cells["InUse"] == "False" and cells["VirtualMachine"] == "vm2"  # the mounted one
    priority = {c["name"]: c["priority"] for c in answer["columnDefinitions"]}
    assert priority["VirtualMachine"] == 0 and priority["InUse"] == 1
    assert cells["Capacity"] is None
    assert cells["Age"] in ("5m", "5m1s")
    assert "object" not in answer["rows"][0]


def _storage_class(name: str, annotations: dict[str, str], **fields: object) -> dict:
    meta = {"name": name, "annotations": annotations, "creationTimestamp": "2026-01-01T00:00:00Z"}
    return {"metadata": meta, "provisioner": "diskferry.io/local", **fields}


def test_storage_class_rows_as_kube_apiserver_prints_them() -> None:
    classes = [
        _storage_class("fast", {"storageclass.kubernetes.io/is-default-class": "true"}),
        _storage_class("beta", {"storageclass.beta.kubernetes.io/is-default-class": "true"}),
        _storage_class("slow", {"storageclass.kubernetes.io/is-default-class": "false"}),
        _storage_class("fixed", {}, allowVolumeExpansion=False, reclaimPolicy="Retain"),
    ]
    made = table(STORAGE_CLASSES, classes)
    names = [c["name"] for c in made["columnDefinitions"]]
    assert names == [
        "Name",
        "Provisioner",
        "ReclaimPolicy",
        "VolumeBindingMode",
        "AllowVolumeExpansion",
        "Age",
    ]
    rows = [row["cells"][:5] for row in made["rows"]]
    assert rows == [
        ["fast (default)", "diskferry.io/local", "Delete", "Immediate", True],
        ["beta (default)", "diskferry.io/local", "Delete", "Immediate", True],
        ["slow", "diskferry.io/local", "Delete", "Immediate", True],
        ["fixed", "diskferry.io/local", "Retain", "Immediate", False],
    ]
    assert made["rows"][0]["object"]["metadata"]["name"] == "fast"
