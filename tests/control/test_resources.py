"""The kinds' models: the examples accepted, bad manifests refused naming the field at fault."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from diskferry.control.apiserver.validation import validate
from diskferry.control.errors import InvalidError
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.storageclass import StorageClass
from diskferry.control.resources.updates import check_update
from diskferry.control.resources.virtualdisk import DiskPhase, VirtualDisk
from diskferry.control.resources.vmexport import VirtualMachineExport

KINDS = {
    "VirtualDisk",
    "VirtualImage",
    "VirtualDiskSnapshot",
    "VirtualMachineExport",
    "VirtualMachine",
    "DataMoverConfig",
    "StorageClass",
    "Secret",
}


def refusal(data: dict[str, Any]) -> str:
    """The message `data` is refused with."""
    info = REGISTRY.by_kind(data["kind"])
    with pytest.raises(InvalidError) as caught:
        validate(info, data)
    return caught.value.message


VD1 = {
    "apiVersion": "diskferry.io/v1alpha1",
    "kind": "VirtualDisk",
    "metadata": {"name": "vd1", "namespace": "default"},
    "spec": {
        "persistentVolumeClaim": {"size": "64Mi"},
        "dataSource": {"type": "HTTP", "http": {"url": "https://example.org/disk.qcow2"}},
    },
}


def vd(**spec: Any) -> dict[str, Any]:
    """vd1 with `spec` replaced."""
    data = copy.deepcopy(VD1)
    data["spec"] = spec
    return data


def test_every_kind_has_an_example(examples: list[dict[str, Any]]) -> None:
    assert {doc["kind"] for doc in examples} >= KINDS


def test_examples_validate_and_round_trip(example: dict[str, Any]) -> None:
    info = REGISTRY.by_kind(example["kind"])
    model, warnings = validate(info, copy.deepcopy(example))
    assert warnings == []
    again, _ = validate(info, model.to_json())
    assert again == model


def test_the_fixed_shapes_read_as_given(examples: list[dict[str, Any]]) -> None:
    docs = {doc["metadata"]["name"]: doc for doc in examples}
    disk = VirtualDisk.model_validate(docs["vd1"])
    assert disk.spec.persistent_volume_claim.size_bytes == 64 << 20
    assert disk.spec.data_source is not None
    assert disk.spec.data_source.http is not None
    assert disk.spec.data_source.http.url == "https://example.org/disk.qcow2"
    export = VirtualMachineExport.model_validate(docs["ex1"])
    assert export.spec.source.kind == "VirtualDisk" and export.spec.source.name == "vd1"
    assert export.spec.ttl == timedelta(hours=2)
    assert export.token_secret_name == "export-token-ex1"
    storage = StorageClass.model_validate(docs["local"])
    assert storage.is_default and storage.local_parameters.type == "file"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            vd(persistentVolumeClaim={"size": "64Mi", "color": "red"}),
            "spec.persistentVolumeClaim.color: unknown field",
        ),
        ({**VD1, "extra": 1}, "extra: unknown field"),
        (vd(persistentVolumeClaim={"size": "64Mb"}), "spec.persistentVolumeClaim.size: '64Mb'"),
        (vd(persistentVolumeClaim={"size": "-1Gi"}), "spec.persistentVolumeClaim.size: '-1Gi'"),
        (vd(dataSource={"type": "FTP"}), "spec.dataSource.type: Input should be 'HTTP'"),
        (vd(dataSource={"type": "HTTP"}), "spec.dataSource: type HTTP requires http"),
        (
            vd(dataSource={"type": "ObjectRef"}),
            "spec.dataSource: type ObjectRef requires objectRef",
        ),
        (
            vd(
                dataSource={
                    "type": "ObjectRef",
                    "objectRef": {"kind": "VirtualImage", "name": "a"},
                    "http": {"url": "http://x/y"},
                }
            ),
            "spec.dataSource: type ObjectRef cannot have http",
        ),
        (
            vd(
                dataSource={
                    "type": "ObjectRef",
                    "objectRef": {"kind": "VirtualMachine", "name": "a"},
                }
            ),
            "spec.dataSource.objectRef.kind: Input should be",
        ),
        (vd(dataSource={"type": "HTTP", "http": {"url": "ftp://x/y"}}), "spec.dataSource.http.url"),
        (
            vd(
                dataSource={
                    "type": "HTTP",
                    "http": {"url": "http://x/y", "checksum": {"md5": "ab"}},
                }
            ),
            "spec.dataSource.http.checksum.md5",
        ),
        (
            vd(dataSource={"type": "HTTP", "http": {"url": "http://x/y", "caBundle": "%%"}}),
            "spec.dataSource.http.caBundle: not base64",
        ),
        (vd(), "spec: persistentVolumeClaim.size is required for a blank disk"),
        ({**VD1, "apiVersion": "virtualization.deckhouse.io/v1alpha2"}, "apiVersion: Input should"),
        ({**VD1, "status": {"phase": "Done"}}, "status.phase: Input should be 'Pending'"),
        ({**VD1, "status": {"progress": "half"}}, "status.progress"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_bad_virtual_disks_name_the_field(data: dict[str, Any], expected: str) -> None:
    message = refusal(data)
    assert message.startswith('VirtualDisk.diskferry.io "vd1" is invalid: ')
    assert expected in message


def test_a_blank_disk_needs_only_a_size() -> None:
    model, _ = validate(REGISTRY.by_kind("VirtualDisk"), vd(persistentVolumeClaim={"size": 100}))
    assert model.to_json()["spec"] == {"persistentVolumeClaim": {"size": "100"}}


def test_status_phases_are_enums() -> None:
    disk = VirtualDisk.model_validate({**VD1, "status": {"phase": "PVCLost", "progress": "42.5%"}})
    assert disk.status.phase is DiskPhase.PVC_LOST
    assert disk.to_json()["status"]["phase"] == "PVCLost"


EXPORT = {
    "apiVersion": "diskferry.io/v1alpha1",
    "kind": "VirtualMachineExport",
    "metadata": {"name": "ex1", "namespace": "default"},
    "spec": {"source": {"apiGroup": "diskferry.io", "kind": "VirtualDisk", "name": "vd1"}},
}


def test_export_fields() -> None:
    data = copy.deepcopy(EXPORT)
    data["spec"].update(tokenSecretRef="mine", ttlDuration="1h30m")
    export = VirtualMachineExport.model_validate(data)
    assert export.spec.ttl == timedelta(minutes=90)
    assert export.token_secret_name == "mine"
    link = {
        "cert": "PEM",
        "volumes": [{"name": "vd1", "formats": [{"format": "tar.gz", "url": "u"}]}],
    }
    data["status"] = {"phase": "Ready", "links": {"internal": link}, "tokenSecretRef": "mine"}
    ready = VirtualMachineExport.model_validate(data)
    assert (
        ready.to_json()["status"]["links"]["internal"]["volumes"][0]["formats"][0]["format"]
        == "tar.gz"
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"source": {"kind": "DataVolume", "name": "a"}}, "spec.source.kind"),
        (
            {"source": {"apiGroup": "cdi.kubevirt.io", "kind": "VirtualDisk", "name": "a"}},
            "spec.source.apiGroup",
        ),
        (
            {"source": {"kind": "VirtualDisk", "name": "a"}, "ttlDuration": "2 hours"},
            "spec.ttlDuration: '2 hours' is not a duration",
        ),
        ({"source": {"kind": "VirtualDisk"}}, "spec.source.name: Field required"),
    ],
)
def test_bad_exports_name_the_field(spec: dict[str, Any], expected: str) -> None:
    assert expected in refusal({**EXPORT, "spec": spec})


IMAGE = {
    "apiVersion": "diskferry.io/v1alpha1",
    "kind": "VirtualImage",
    "metadata": {"name": "image1", "namespace": "default"},
    "spec": {"dataSource": {"type": "HTTP", "http": {"url": "https://example.org/i.qcow2"}}},
}
CLUSTER_IMAGE = {**IMAGE, "kind": "ClusterVirtualImage", "metadata": {"name": "image1"}}
UPLOAD_CHECKED = {"type": "Upload", "upload": {"checksum": {"md5": "a" * 32, "sha256": "b" * 64}}}


@pytest.mark.parametrize(
    "data",
    [
        IMAGE,
        CLUSTER_IMAGE,
        vd(dataSource={"type": "ContainerImage", "containerImage": {"image": "r.io/a:1"}}),
        vd(dataSource={"type": "ContainerImage", "containerImage": {"image": "docker://r.io/a"}}),
        vd(dataSource={"type": "Upload"}),
        {**IMAGE, "spec": {"dataSource": {"type": "Upload"}}},
        {**CLUSTER_IMAGE, "spec": {"dataSource": {"type": "Upload"}}},
        vd(dataSource=UPLOAD_CHECKED),
        {**IMAGE, "spec": {"dataSource": UPLOAD_CHECKED}},
        {**CLUSTER_IMAGE, "spec": {"dataSource": UPLOAD_CHECKED}},
    ],
    ids=[
        "registry-storage",
        "cluster-image",
        "container-image",
        "docker-ref",
        "upload",
        "image-upload",
        "cluster-upload",
        "upload-checksum",
        "image-upload-checksum",
        "cluster-upload-checksum",
    ],
)
def test_the_image_store_sources_and_storage_are_taken(data: dict[str, Any]) -> None:
    validate(REGISTRY.by_kind(data["kind"]), data)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            {"type": "ContainerImage", "containerImage": {"image": "r.io/Bad Name:1"}},
            "spec.dataSource.containerImage.image: not HOST[:PORT]/NAME[:TAG|@DIGEST]",
        ),
        (
            {"type": "ContainerImage", "containerImage": {"image": "r.io/a:t@sha256:12"}},
            "spec.dataSource.containerImage.image: not HOST[:PORT]/NAME[:TAG|@DIGEST]",
        ),
        (
            {"type": "ContainerImage"},
            "spec.dataSource: type ContainerImage requires containerImage",
        ),
        (
            {"type": "Upload", "http": {"url": "https://example.org/a"}},
            "spec.dataSource: type Upload cannot have http",
        ),
        (
            {"type": "HTTP", "http": {"url": "https://example.org/a"}, "upload": {}},
            "spec.dataSource: type HTTP cannot have upload",
        ),
        (
            {"type": "Upload", "upload": {"checksum": {"sha256": "abc"}}},
            "spec.dataSource.upload.checksum.sha256: String should match pattern",
        ),
    ],
    ids=[
        "bad-name",
        "bad-digest",
        "no-sub-object",
        "upload-with-http",
        "http-with-upload",
        "short-upload-sha256",
    ],
)
def test_bad_image_sources_name_the_field(source: dict[str, Any], expected: str) -> None:
    message = refusal(vd(dataSource=source))
    assert expected in message and "\n" not in message


def test_cluster_image_object_refs_name_a_namespace() -> None:
    ref = {"type": "ObjectRef", "objectRef": {"kind": "VirtualDisk", "name": "vd1"}}
    data = {**CLUSTER_IMAGE, "spec": {"dataSource": ref}}
    assert "spec.dataSource.objectRef: namespace is required for a VirtualDisk" in refusal(data)
    ref["objectRef"]["namespace"] = "default"
    validate(REGISTRY.by_kind("ClusterVirtualImage"), data)


def test_snapshot_and_storage_class_refusals() -> None:
    snapshot = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualDiskSnapshot",
        "metadata": {"name": "s"},
        "spec": {"virtualDiskName": "Not_A_Name"},
    }
    assert "spec.virtualDiskName" in refusal(snapshot)
    storage = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "local"},
        "parameters": {"path": "relative/dir", "type": "tape", "pool": "rbd"},
    }
    message = refusal(storage)
    assert "parameters.path: must be an absolute directory" in message
    assert "parameters.type: Input should be 'file' or 'block'" in message
    assert "parameters.pool: unknown field" in message
    # another provisioner's parameters are its own: kept as given
    validate(REGISTRY.lookup("sc"), {**storage, "provisioner": "kubernetes.io/no-provisioner"})
    assert "provisioner: String should match pattern" in refusal(
        {**storage, "provisioner": "not a provisioner"}
    )
    mounted = {**storage, "parameters": {}, "mountOptions": ["discard"]}
    assert "mountOptions: a class of diskferry.io/local has none" in refusal(mounted)


def test_registry_names() -> None:
    for name, kind in [
        ("vd", "VirtualDisk"),
        ("vi", "VirtualImage"),
        ("cvi", "ClusterVirtualImage"),
        ("vdsnapshot", "VirtualDiskSnapshot"),
        ("vds", "VirtualDiskSnapshot"),
        ("vmexport", "VirtualMachineExport"),
        ("vmexports", "VirtualMachineExport"),
        ("virtualmachineexports", "VirtualMachineExport"),
        ("sc", "StorageClass"),
    ]:
        assert REGISTRY.lookup(name).kind == kind
    assert not REGISTRY.by_kind("ClusterVirtualImage").namespaced
    assert not REGISTRY.by_kind("StorageClass").namespaced
    assert REGISTRY.by_kind("StorageClass").api_version == "storage.k8s.io/v1"
    assert REGISTRY.by_plural("diskferry.io", "v1alpha1", "virtualdisks").kind == "VirtualDisk"


def _update(data: dict[str, Any], change: dict[str, Any]) -> tuple[Any, Any]:
    info = REGISTRY.by_kind(data["kind"])
    old, _ = validate(info, copy.deepcopy(data))
    new, _ = validate(info, {**copy.deepcopy(data), **change})
    return old, new


def update_refusal(data: dict[str, Any], change: dict[str, Any]) -> str:
    """The message an update of `data` by `change` is refused with."""
    old, new = _update(data, change)
    with pytest.raises(InvalidError) as caught:
        check_update(REGISTRY.by_kind(data["kind"]), old, new)
    return caught.value.message


def test_a_disk_may_only_grow() -> None:
    ready = {**VD1, "status": {"phase": "Ready"}}
    bigger = vd(**{**VD1["spec"], "persistentVolumeClaim": {"size": "1Gi"}})
    check_update(REGISTRY.by_kind("VirtualDisk"), *_update(ready, {"spec": bigger["spec"]}))
    smaller = vd(**{**VD1["spec"], "persistentVolumeClaim": {"size": "32Mi"}})
    assert "spec.persistentVolumeClaim.size: may only grow: 32Mi is less than 64Mi" in (
        update_refusal(ready, {"spec": smaller["spec"]})
    )
    other = vd(**{**VD1["spec"], "dataSource": {"type": "HTTP", "http": {"url": "http://b/c"}}})
    assert "spec.dataSource: field is immutable" in update_refusal(ready, {"spec": other["spec"]})
    moved = {**VD1["spec"], "persistentVolumeClaim": {"size": "64Mi", "storageClassName": "b"}}
    assert "spec.persistentVolumeClaim.storageClassName: field is immutable" in update_refusal(
        ready, {"spec": moved}
    )


MOVED = {
    "persistentVolumeClaim": {"size": "32Mi", "storageClassName": "b"},
    "dataSource": {"type": "HTTP", "http": {"url": "https://example.org/other.qcow2"}},
}


@pytest.mark.parametrize("status", [None, {"phase": "Pending"}], ids=["new", "pending"])
def test_a_disk_whose_work_has_not_started_may_change_its_spec(status) -> None:
    data = {**VD1, "status": status} if status else VD1
    check_update(REGISTRY.by_kind("VirtualDisk"), *_update(data, {"spec": MOVED}))


@pytest.mark.parametrize("phase", ["Provisioning", "WaitForUserUpload", "Ready", "Failed"])
def test_a_disk_whose_work_has_started_says_why_its_spec_is_fixed(phase) -> None:
    message = update_refusal({**VD1, "status": {"phase": phase}}, {"spec": MOVED})
    assert (
        "spec.persistentVolumeClaim.storageClassName: field is immutable once the disk has "
        f"left Pending (it is {phase}: its claim is made or its worker started); only "
        "spec.persistentVolumeClaim.size may change, to grow"
    ) in message
    assert "spec.dataSource: field is immutable once the disk has left Pending" in message


@pytest.mark.parametrize("data", [IMAGE, CLUSTER_IMAGE], ids=["image", "cluster-image"])
def test_an_image_may_change_its_spec_until_its_work_starts(data) -> None:
    other = {"spec": {"dataSource": MOVED["dataSource"]}}
    pending = {**data, "status": {"phase": "Pending"}}
    check_update(REGISTRY.by_kind(data["kind"]), *_update(pending, other))
    message = update_refusal({**data, "status": {"phase": "Provisioning"}}, other)
    assert message.endswith(
        "spec.dataSource: field is immutable once the image has left Pending (it is "
        "Provisioning: its worker started)"
    )


def test_other_specs_are_fixed_and_metadata_free() -> None:
    labelled = {"metadata": {**EXPORT["metadata"], "labels": {"a": "b"}}}
    check_update(REGISTRY.by_kind("VirtualMachineExport"), *_update(EXPORT, labelled))
    renamed = {"spec": {"source": {"kind": "VirtualDisk", "name": "vd2"}}}
    message = update_refusal(EXPORT, renamed)
    assert message == 'VirtualMachineExport.diskferry.io "ex1" is invalid: spec: field is immutable'
    storage = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "local"},
        "parameters": {"type": "file"},
    }
    check_update(REGISTRY.lookup("sc"), *_update(storage, {"allowVolumeExpansion": True}))
    assert "parameters: field is immutable" in update_refusal(
        storage, {"parameters": {"type": "block"}}
    )
