"""The VirtualMachineBackup and VirtualMachineBackupTracker models: KubeVirt's field names,
Push's target (storageLocation, or KubeVirt's pvcName), the Pull defaults, the sources as
KubeVirt writes them, immutable specs, KubeVirt's columns."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from diskferry.control.errors import InvalidError
from diskferry.control.resources.noeffect import reason_of
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.updates import check_update
from diskferry.control.resources.vmbackup import BackupMode, VirtualMachineBackup
from diskferry.control.resources.vmbackuptracker import VirtualMachineBackupTracker

VM = {"kind": "VirtualMachine", "name": "vm1"}


def backup(status: dict[str, Any] | None = None, **spec: Any) -> VirtualMachineBackup:
    body = {"apiVersion": "diskferry.io/v1alpha1", "metadata": {"name": "b1"}, "spec": spec}
    return VirtualMachineBackup.model_validate({**body, "status": status or {}})


def test_push_needs_a_storage_location() -> None:
    with pytest.raises(ValidationError, match=r"spec\.storageLocation or spec\.pvcName"):
        backup(source=VM)
    assert backup(source=VM, storageLocation="repo").spec.mode == BackupMode.PUSH


def test_kubevirts_pvc_name_is_where_a_push_goes() -> None:
    pushed = backup(source=VM, pvcName="backup-output-pvc")
    assert pushed.spec.location == "backup-output-pvc"
    assert backup(source=VM, storageLocation="repo", pvcName="repo").spec.location == "repo"
    with pytest.raises(ValidationError, match="name different BackupStorageLocations"):
        backup(source=VM, storageLocation="repo", pvcName="backup-output-pvc")
    pulled = backup(source=VM, mode="Pull", pvcName="scratch", tokenSecretRef="t")
    assert pulled.spec.location is None
    description = VirtualMachineBackup.model_json_schema(by_alias=True)["$defs"][
        "VirtualMachineBackupSpec"
    ]["properties"]["pvcName"]["description"]
    assert "BackupStorageLocation" in description and "Pull" in description


@pytest.mark.parametrize(
    "source",
    [
        {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "my-vm"},
        {"apiGroup": "backup.kubevirt.io", "kind": "VirtualMachineBackupTracker", "name": "t"},
        {"apiGroup": "diskferry.io", "kind": "VirtualMachineBackupTracker", "name": "t"},
        {"kind": "VirtualMachine", "name": "my-vm"},
    ],
)
def test_sources_as_kubevirt_writes_them(source: dict[str, str]) -> None:
    assert backup(source=source, pvcName="p").to_json()["spec"]["source"] == source


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            {"apiGroup": "kubevirt.io", "kind": "VirtualMachineBackupTracker", "name": "t"},
            "a VirtualMachineBackupTracker's apiGroup is backup.kubevirt.io, diskferry.io or unset",
        ),
        (
            {"apiGroup": "backup.kubevirt.io", "kind": "VirtualMachine", "name": "vm"},
            "a VirtualMachine's apiGroup is kubevirt.io, diskferry.io or unset",
        ),
    ],
)
def test_a_group_that_does_not_go_with_the_kind_is_refused(
    source: dict[str, str], expected: str
) -> None:
    with pytest.raises(ValidationError, match=expected):
        backup(source=source, pvcName="p")
    body = {"apiVersion": "diskferry.io/v1alpha1", "metadata": {"name": "t1"}}
    if source["kind"] == "VirtualMachine":
        with pytest.raises(ValidationError, match=expected):
            VirtualMachineBackupTracker.model_validate({**body, "spec": {"source": source}})


def test_a_tracker_of_a_kubevirt_vm_and_its_status() -> None:
    body = {"apiVersion": "diskferry.io/v1alpha1", "metadata": {"name": "t1"}}
    source = {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "my-vm"}
    status = {"checkpointRedefinitionRequired": True}
    made = VirtualMachineBackupTracker.model_validate(
        {**body, "spec": {"source": source}, "status": status}
    )
    assert made.to_json()["status"]["checkpointRedefinitionRequired"] is True
    schema = VirtualMachineBackupTracker.model_json_schema(by_alias=True)["$defs"]
    field = schema["VirtualMachineBackupTrackerStatus"]["properties"]
    assert reason_of(field["checkpointRedefinitionRequired"]) is not None


def test_specs_are_immutable_as_kubevirts() -> None:
    for kind, spec, changed in (
        ("VirtualMachineBackup", {"source": VM, "storageLocation": "a"}, {"storageLocation": "b"}),
        ("VirtualMachineBackupTracker", {"source": VM}, {"source": {**VM, "name": "vm2"}}),
    ):
        info = REGISTRY.by_kind(kind)
        old = info.model.model_validate({"metadata": {"name": "x"}, "spec": spec})
        new = info.model.model_validate({"metadata": {"name": "x"}, "spec": {**spec, **changed}})
        with pytest.raises(InvalidError, match="spec: field is immutable"):
            check_update(info, old, new)
        check_update(info, old, old.model_copy())


def test_kubevirts_columns_first() -> None:
    backups = [c.name for c in REGISTRY.by_kind("VirtualMachineBackup").columns]
    assert backups == ["SourceKind", "SourceName", "Type", "CheckpointName", "Mode", "Phase"]
    trackers = [c.name for c in REGISTRY.by_kind("VirtualMachineBackupTracker").columns]
    assert trackers == ["SourceKind", "SourceName", "LatestCheckpoint", "CheckpointTime"]


def test_pull_defaults_its_ttl_and_token_secret() -> None:
    pulled = backup(source=VM, mode="Pull", skipQuiesce=True, forceFullBackup=True)
    assert pulled.spec.ttl == timedelta(hours=2)
    assert pulled.token_secret_name == "backup-token-b1"
    assert backup(source=VM, mode="Pull", ttlDuration="90s").spec.ttl == timedelta(seconds=90)
    assert backup(source=VM, mode="Pull", tokenSecretRef="t").token_secret_name == "t"


def test_sources_each_kind_accepts() -> None:
    tracked = {"kind": "VirtualMachineBackupTracker", "name": "t1"}
    assert backup(source=tracked, mode="Pull").spec.source.kind == tracked["kind"]
    with pytest.raises(ValidationError):
        backup(source={"kind": "VirtualDisk", "name": "vd"}, mode="Pull")
    body = {"apiVersion": "diskferry.io/v1alpha1", "metadata": {"name": "t1"}}
    with pytest.raises(ValidationError):
        VirtualMachineBackupTracker.model_validate({**body, "spec": {"source": tracked}})
    made = VirtualMachineBackupTracker.model_validate({**body, "spec": {"source": VM}})
    assert made.status.latest_checkpoint is None


def test_status_carries_kubevirts_names() -> None:
    volume = {"volumeName": "vd", "dataEndpoint": "d", "mapEndpoint": "m"}
    status = {
        "phase": "Ready",
        "type": "Incremental",
        "checkpointName": "c1",
        "endpointCert": "PEM",
        "includedVolumes": [volume],
        "links": {"internal": {"cert": "PEM", "volumes": [volume]}},
        "conditions": [],
    }
    parsed = backup(source=VM, mode="Pull", status={**status, "exportUID": "u-1"})
    assert parsed.model_validate(parsed.to_json()).to_json()["status"] == {
        **status,
        "exportUID": "u-1",
    }


def test_short_names() -> None:
    assert REGISTRY.lookup("vmbackup").kind == "VirtualMachineBackup"
    assert REGISTRY.lookup("vmbackuptracker").kind == "VirtualMachineBackupTracker"
