"""The VirtualMachineBackup and VirtualMachineBackupTracker models: KubeVirt's field names,
Push's target, the Pull defaults, the source kinds each accepts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from diskferry.control.resources import REGISTRY
from diskferry.control.resources.vmbackup import BackupMode, VirtualMachineBackup
from diskferry.control.resources.vmbackuptracker import VirtualMachineBackupTracker

VM = {"kind": "VirtualMachine", "name": "vm1"}


def backup(status: dict[str, Any] | None = None, **spec: Any) -> VirtualMachineBackup:
    body = {"apiVersion": "diskferry.io/v1alpha1", "metadata": {"name": "b1"}, "spec": spec}
    return VirtualMachineBackup.model_validate({**body, "status": status or {}})


def test_push_needs_a_storage_location() -> None:
    with pytest.raises(ValidationError, match="storageLocation"):
        backup(source=VM)
    assert backup(source=VM, storageLocation="repo").spec.mode == BackupMode.PUSH


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
    parsed = backup(source=VM, mode="Pull", status=status)
    assert parsed.model_validate(parsed.to_json()).to_json()["status"] == status


def test_short_names() -> None:
    assert REGISTRY.lookup("vmbackup").kind == "VirtualMachineBackup"
    assert REGISTRY.lookup("vmbackuptracker").kind == "VirtualMachineBackupTracker"
