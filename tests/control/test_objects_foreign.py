"""A cluster's own kinds in the store, as the stand-in API serves them without controllers:
checked against Kubernetes' schemas where kubernetes-validate has them, kept as given where it
has none, with a status subresource where the real kind has one; `diskferry serve` serves none
of them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.errors import InvalidError, NotFoundError
from diskferry.control.resources.foreign import FOREIGN_KINDS, with_foreign_kinds
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualmachine import VIRTUAL_MACHINES

REGISTRY_WITH_FOREIGN = with_foreign_kinds(REGISTRY)


def _info(api_version: str, kind: str):
    group, _, _ = api_version.rpartition("/")
    return REGISTRY_WITH_FOREIGN.by_kind(kind, group)


def deployment(name: str = "web", **spec: Any) -> dict[str, Any]:
    """A Deployment of one nginx container."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
            **spec,
        },
    }


@pytest.fixture
def objects(tmp_path: Path) -> Iterator[ObjectService]:
    service = ObjectService(tmp_path / "state.db", REGISTRY_WITH_FOREIGN)
    yield service
    service.close()


def test_a_deployment_is_stored_as_given_without_status(objects: ObjectService) -> None:
    info = _info("apps/v1", "Deployment")
    body = deployment(status={"replicas": 9})
    body["status"] = body["spec"].pop("status")
    stored, warnings = objects.create(info, "default", body)
    assert warnings == []
    assert stored["spec"] == deployment()["spec"]
    assert "status" not in stored
    assert objects.get(info, "default", "web")["spec"]["replicas"] == 2


def test_a_deployment_status_is_written_through_its_subresource(objects: ObjectService) -> None:
    info = _info("apps/v1", "Deployment")
    objects.create(info, "default", deployment())
    status = {"status": {"replicas": 2, "readyReplicas": 1}}
    patched, _ = objects.patch(info, "default", "web", status, "merge", subresource="status")
    assert patched["status"] == {"replicas": 2, "readyReplicas": 1}
    assert patched["spec"]["replicas"] == 2


def test_an_unknown_field_of_a_known_schema_is_refused_by_its_path(objects: ObjectService) -> None:
    info = _info("apps/v1", "Deployment")
    with pytest.raises(InvalidError) as refused:
        objects.create(info, "default", deployment(replicaz=3))
    assert [c["field"] for c in refused.value.causes] == ["spec.replicaz"]
    with pytest.raises(NotFoundError):
        objects.get(info, "default", "web")


def test_unknown_fields_are_dropped_with_a_warning_each_on_warn(objects: ObjectService) -> None:
    info = _info("apps/v1", "Deployment")
    body = deployment(replicaz=3)
    body["spec"]["template"]["spec"]["containers"][0]["imagez"] = "x"
    stored, warnings = objects.create(info, "default", body, field_validation="Warn")
    assert sorted(warnings) == [
        'unknown field "spec.replicaz"',
        'unknown field "spec.template.spec.containers[0].imagez"',
    ]
    assert stored["spec"] == deployment()["spec"]


def test_a_value_of_the_wrong_type_is_refused_by_its_path(objects: ObjectService) -> None:
    info = _info("apps/v1", "Deployment")
    with pytest.raises(InvalidError) as refused:
        objects.create(info, "default", deployment(replicas="two"))
    assert [c["field"] for c in refused.value.causes] == ["spec.replicas"]
    assert "'two'" not in refused.value.message  # what was sent is not echoed


def test_a_missing_required_field_is_refused(objects: ObjectService) -> None:
    info = _info("apps/v1", "Deployment")
    body = deployment()
    del body["spec"]["selector"]
    with pytest.raises(InvalidError) as refused:
        objects.create(info, "default", body)
    assert "selector" in refused.value.message


def test_a_lease_has_no_status_and_its_spec_changes(objects: ObjectService) -> None:
    info = _info("coordination.k8s.io/v1", "Lease")
    assert not info.has_status
    body = {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a"}}
    created, _ = objects.create(info, "default", body)
    created["spec"]["holderIdentity"] = "b"
    updated, _ = objects.update(info, "default", "leader", created)
    assert updated["spec"]["holderIdentity"] == "b"


def test_a_kind_without_a_schema_keeps_whatever_it_is_given(objects: ObjectService) -> None:
    info = _info("kubevirt.io/v1", "VirtualMachine")
    spec = {"runStrategy": "Always", "anything": {"nested": [1, "two"]}}
    body = {"metadata": {"name": "vm1"}, "spec": spec}
    stored, warnings = objects.create(info, "default", body)
    assert warnings == []
    assert stored["spec"] == spec
    assert stored["apiVersion"] == "kubevirt.io/v1"


def test_every_kind_the_operator_uses_is_served() -> None:
    served = {(i.api_version, i.kind) for i in REGISTRY_WITH_FOREIGN.kinds}
    wanted = {
        ("v1", kind)
        for kind in (
            "Pod",
            "Service",
            "PersistentVolumeClaim",
            "PersistentVolume",
            "Secret",
            "ConfigMap",
            "Event",
            "ServiceAccount",
            "Namespace",
        )
    }
    wanted |= {
        ("apps/v1", "Deployment"),
        ("coordination.k8s.io/v1", "Lease"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        ("route.openshift.io/v1", "Route"),
        ("networking.k8s.io/v1", "Ingress"),
        ("kubevirt.io/v1", "VirtualMachine"),
        ("kubevirt.io/v1", "VirtualMachineInstance"),
        ("backup.kubevirt.io/v1alpha1", "VirtualMachineBackup"),
        ("backup.kubevirt.io/v1alpha1", "VirtualMachineBackupTracker"),
    }
    assert wanted <= served


def test_diskferry_kinds_keep_their_names_beside_the_cluster_kinds() -> None:
    assert REGISTRY_WITH_FOREIGN.by_kind("VirtualMachine") is VIRTUAL_MACHINES
    assert REGISTRY_WITH_FOREIGN.lookup("vm") is VIRTUAL_MACHINES
    kinds = [(i.group, i.kind) for i in REGISTRY_WITH_FOREIGN.kinds]
    assert len(kinds) == len(set(kinds))


def test_the_daemon_serves_none_of_them() -> None:
    for info in FOREIGN_KINDS:
        with pytest.raises(NotFoundError):
            REGISTRY.by_plural(info.group, info.version, info.plural)
