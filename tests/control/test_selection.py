"""Velero's filters as a Backup and a Restore read them: namespaces as globs, resources named as
kubectl names them (with or without the group), `*`, exclusions winning, and the rule of
includeClusterResources for the ClusterVirtualImages the VMs mount."""

from __future__ import annotations

from typing import Any

import pytest

from diskferry.control.reconcilers.velero.selection import (
    ClusterImages,
    backup_taken,
    kind_taken,
    restore_taken,
)
from diskferry.control.resources.backup import BackupSpec
from diskferry.control.resources.restore import RestoreSpec


@pytest.mark.parametrize(
    "name",
    [
        "virtualmachines",
        "virtualmachine",
        "VirtualMachine",
        "vm",
        "virtualmachines.diskferry.io",
        "virtualmachine.diskferry.io",
        "*",
    ],
)
def test_a_vm_is_named_as_velero_resolves_it(name: str) -> None:
    assert kind_taken("VirtualMachine", [name], [])
    assert not kind_taken("VirtualMachine", [], [name])


@pytest.mark.parametrize(
    "name", ["pods", "virtualmachines.kubevirt.io", "storageclasses.storage.k8s.io", "vd"]
)
def test_other_names_do_not_take_a_vm(name: str) -> None:
    assert not kind_taken("VirtualMachine", [name], [])
    assert kind_taken("VirtualMachine", [], [name])


def test_an_exclusion_wins_over_an_inclusion() -> None:
    assert not kind_taken("VirtualDisk", ["*"], ["virtualdisks"])
    assert kind_taken("VirtualMachine", ["*"], ["virtualdisks"])


def backup(**spec: Any) -> BackupSpec:
    return BackupSpec.model_validate(spec)


def test_namespaces_are_globs_and_exclusions_win() -> None:
    spec = backup(includedNamespaces=["prod-*", "te?t"], excludedNamespaces=["prod-old"])
    assert spec.namespace_taken("prod-a") and spec.namespace_taken("test")
    assert not spec.namespace_taken("prod-old") and not spec.namespace_taken("dev")
    assert backup(includedNamespaces=["*"]).namespace_taken("any")
    assert backup(excludedNamespaces=["[ab]*"]).namespace_taken("c1")
    assert not backup(excludedNamespaces=["[ab]*"]).namespace_taken("b1")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, ClusterImages.ALL),
        ({"includedNamespaces": ["*"]}, ClusterImages.ALL),
        ({"includedNamespaces": ["web"]}, ClusterImages.RELATED),
        ({"excludedNamespaces": ["web"]}, ClusterImages.RELATED),
        ({"includedNamespaces": ["web"], "includeClusterResources": True}, ClusterImages.ALL),
        ({"includeClusterResources": False}, ClusterImages.NONE),
        ({"excludedResources": ["clustervirtualimages"]}, ClusterImages.NONE),
        ({"includedResources": ["virtualmachines"]}, ClusterImages.NONE),
        ({"includedClusterScopedResources": ["cvi"]}, ClusterImages.ALL),
        ({"includedNamespaceScopedResources": ["vm"]}, ClusterImages.RELATED),
        ({"excludedClusterScopedResources": ["*"]}, ClusterImages.NONE),
    ],
)
def test_cluster_images_follow_include_cluster_resources(
    spec: dict[str, Any], expected: ClusterImages
) -> None:
    assert backup_taken(backup(**spec)).cluster_images is expected


def test_the_newer_filters_take_the_namespaced_kinds() -> None:
    taken = backup_taken(backup(includedNamespaceScopedResources=["virtualmachines"]))
    assert taken.vms and not taken.disks and not taken.images
    assert backup_taken(backup(excludedNamespaceScopedResources=["vd"])).vms


def test_velero_refuses_old_and_new_filters_together() -> None:
    spec = backup(includedResources=["vm"], includedClusterScopedResources=["cvi"])
    [error] = spec.filter_errors()
    assert "cannot be used together" in error
    assert backup(includedResources=["*"], includedClusterScopedResources={}).filter_errors() == []


def test_label_selector_and_or_label_selectors_are_not_both_taken() -> None:
    spec = backup(
        labelSelector={"matchLabels": {"a": "1"}}, orLabelSelectors=[{"matchLabels": {"b": "2"}}]
    )
    assert "only one can be specified" in spec.filter_errors()[0]
    either = backup(orLabelSelectors=[{"matchLabels": {"a": "1"}}, {"matchLabels": {"b": "2"}}])
    assert either.labels_match({"b": "2"}) and not either.labels_match({"c": "3"})


def test_a_restore_takes_what_its_filters_name() -> None:
    spec = RestoreSpec.model_validate(
        {"backupName": "b", "excludedResources": ["virtualdisks"], "includedNamespaces": ["a"]}
    )
    taken = restore_taken(spec)
    assert taken.vms and not taken.disks and taken.cluster_images is ClusterImages.RELATED


def test_a_restore_names_a_backup_or_a_schedule() -> None:
    neither = RestoreSpec.model_validate({})
    both = RestoreSpec.model_validate({"backupName": "b", "scheduleName": "s"})
    for spec in (neither, both):
        assert "either a backup or schedule" in spec.source_errors()[0]
    assert RestoreSpec.model_validate({"scheduleName": "s"}).source_errors() == []


def test_an_unknown_datamover_is_a_validation_error() -> None:
    assert backup(datamover="velero").filter_errors() == []
    assert "only diskferry's data mover" in backup(datamover="kopia-x").filter_errors()[0]
