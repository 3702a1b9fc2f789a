"""The embedded host implements each protocol the reconcilers take its services through (its
runner too): every method of the protocol, with its parameters; and answers as the protocol
says."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from control_support import assert_implements

from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.embedded.certs import DaemonCa
from diskferry.control.host.embedded.imagestore import LayoutImageStore
from diskferry.control.host.embedded.machines import QemuMachines
from diskferry.control.host.embedded.proxy import ProxyKeeper
from diskferry.control.host.embedded.volumes import DirectoryVolumes
from diskferry.control.host.images import ImageNotStoredError, ImageStore
from diskferry.control.host.machines import Machines
from diskferry.control.host.proxy import ExportProxy
from diskferry.control.host.volumes import VolumeClass, Volumes
from diskferry.control.resources.virtualimage import ClusterVirtualImage
from diskferry.control.runtime.runner.base import Runner
from diskferry.control.runtime.runner.local import LocalRunner
from diskferry.qemu import cbt

IMPLEMENTED = [
    (Volumes, DirectoryVolumes),
    (ImageStore, LayoutImageStore),
    (ServerCerts, DaemonCa),
    (ExportProxy, ProxyKeeper),
    (Machines, QemuMachines),
    (Runner, LocalRunner),
]


@pytest.mark.parametrize(("protocol", "embedded"), IMPLEMENTED, ids=lambda c: c.__name__)
def test_the_embedded_host_has_every_member_of_each_protocol(
    protocol: type, embedded: type
) -> None:
    assert_implements(protocol, embedded)


def test_an_image_not_in_the_store_is_said_so_in_the_protocols_terms(tmp_path: Path) -> None:
    store = LayoutImageStore(tmp_path)
    image = ClusterVirtualImage.model_validate(
        {
            "metadata": {"name": "img", "uid": "u-1"},
            "spec": {"dataSource": {"type": "HTTP", "http": {"url": "http://x/d.img"}}},
        }
    )
    with pytest.raises(ImageNotStoredError):
        store.disk(image)
    assert not store.holds(store.reference(image))
    assert store.staging.root == tmp_path / "staging"


def test_a_claim_says_whether_it_takes_instant_copies_and_has_cbt(
    tmp_path: Path, reflink_dir: Path
) -> None:
    for root, instant in ((tmp_path / "ext4", False), (reflink_dir / "c", True)):
        volumes = DirectoryVolumes(tmp_path / "data")
        claim = volumes.claim(VolumeClass("c", root=root), "ns", "vd-1", 0)
        with open(claim.path, "wb") as f:
            f.truncate(1 << 20)
        assert volumes.instant_copies(claim) is instant
        assert not volumes.tracked(claim)
        cbt.enable(claim.path)
        assert volumes.tracked(claim)
        os.unlink(cbt.overlay_path(claim.path))
