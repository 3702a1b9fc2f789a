"""A class's claims are asked for as Deckhouse asks for a disk's PVC: the volume mode and access
mode its annotations name, else the most capable its provisioner is known to offer, else
ReadWriteOnce Filesystem; a diskferry.io/local class's as its parameters.type says."""

from __future__ import annotations

from typing import Any

import pytest

from diskferry.control.reconcilers.disks.claimmodes import (
    ACCESS_MODE_ANNOTATION,
    VOLUME_MODE_ANNOTATION,
)
from diskferry.control.reconcilers.disks.storageclasses import volume_class
from diskferry.control.resources.storageclass import StorageClass


def _class(provisioner: str, annotations: dict[str, str] | None = None, **fields: Any) -> Any:
    meta = {"name": "c", "annotations": annotations or {}}
    data = {"metadata": meta, "provisioner": provisioner, **fields}
    return volume_class(StorageClass.model_validate(data))


@pytest.mark.parametrize(
    ("provisioner", "volume_mode", "access_mode"),
    [
        ("rbd.csi.ceph.com", "block", "ReadWriteMany"),
        ("cephfs.csi.ceph.com", "file", "ReadWriteMany"),
        ("topolvm.io", "block", "ReadWriteOnce"),
        ("kubevirt.io/hostpath-provisioner", "file", "ReadWriteOnce"),
        ("example.com/unknown", "file", "ReadWriteOnce"),
    ],
)
def test_the_provisioner_tells_the_modes(
    provisioner: str, volume_mode: str, access_mode: str
) -> None:
    found = _class(provisioner, parameters={"type": "ssd"})
    assert (found.type, found.access_mode, found.provisioner) == (
        volume_mode,
        access_mode,
        provisioner,
    )


def test_the_class_annotations_come_first() -> None:
    notes = {VOLUME_MODE_ANNOTATION: "Filesystem", ACCESS_MODE_ANNOTATION: "ReadWriteOnce"}
    found = _class("rbd.csi.ceph.com", notes)
    assert (found.type, found.access_mode) == ("file", "ReadWriteOnce")
    half = _class("example.com/unknown", {VOLUME_MODE_ANNOTATION: "Block"})
    assert (half.type, half.access_mode) == ("block", "ReadWriteOnce")
    wrong = _class("rbd.csi.ceph.com", {ACCESS_MODE_ANNOTATION: "Sometimes"})
    assert wrong.access_mode == "ReadWriteMany"


def test_a_local_class_is_as_its_type_says() -> None:
    notes = {VOLUME_MODE_ANNOTATION: "Block", ACCESS_MODE_ANNOTATION: "ReadWriteMany"}
    found = _class("diskferry.io/local", notes, parameters={"type": "file", "path": "/srv/d"})
    assert (found.type, found.access_mode) == ("file", "ReadWriteOnce")
    assert str(found.root) == "/srv/d"
    assert _class("diskferry.io/local", parameters={"type": "block"}).block
