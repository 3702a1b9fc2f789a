"""The volume mode and access mode of a class's claims, chosen as Deckhouse's virtualization
controller chooses them for a disk's PVC: the class's annotations first, then what its
provisioner is known to offer (CDI's StorageProfile defaults), the most capable of it
(ReadWriteMany before ReadWriteOnce, Block before Filesystem), else ReadWriteOnce Filesystem.
A class of diskferry.io/local is this host's: its claims are of `parameters.type`,
ReadWriteOnce."""

from __future__ import annotations

from dataclasses import dataclass

from diskferry.control.host.volumes import BLOCK, FILE, READ_WRITE_ONCE
from diskferry.control.resources.storageclass import StorageClass

VOLUME_MODE_ANNOTATION = "virtualdisk.virtualization.deckhouse.io/volume-mode"
ACCESS_MODE_ANNOTATION = "virtualdisk.virtualization.deckhouse.io/access-mode"
READ_WRITE_MANY = "ReadWriteMany"
VOLUME_MODES = {"Block": BLOCK, "Filesystem": FILE}
ACCESS_MODES = (READ_WRITE_ONCE, READ_WRITE_MANY)


@dataclass(frozen=True)
class ClaimModes:
    """How a class's claims are asked for: `type` (file or block, the volume mode) and the
    access mode."""

    type: str = FILE
    access_mode: str = READ_WRITE_ONCE


_RWX_BLOCK = ClaimModes(BLOCK, READ_WRITE_MANY)
_RWO_BLOCK = ClaimModes(BLOCK, READ_WRITE_ONCE)
_RWX_FILE = ClaimModes(FILE, READ_WRITE_MANY)
_RWO_FILE = ClaimModes()

PROFILES = {
    "kubevirt.io.hostpath-provisioner": _RWO_FILE,
    "kubevirt.io/hostpath-provisioner": _RWO_FILE,
    "nfs.csi.k8s.io": _RWX_FILE,
    "k8s-sigs.io/nfs-subdir-external-provisioner": _RWX_FILE,
    "kubernetes.io/rbd": _RWX_BLOCK,
    "rbd.csi.ceph.com": _RWX_BLOCK,
    "rook-ceph.rbd.csi.ceph.com": _RWX_BLOCK,
    "openshift-storage.rbd.csi.ceph.com": _RWX_BLOCK,
    "cephfs.csi.ceph.com": _RWX_FILE,
    "openshift-storage.cephfs.csi.ceph.com": _RWX_FILE,
    "linstor.csi.linbit.com": _RWX_BLOCK,
    "topolvm.cybozu.com": _RWO_BLOCK,
    "topolvm.io": _RWO_BLOCK,
    "ebs.csi.aws.com": _RWO_BLOCK,
    "efs.csi.aws.com": _RWX_FILE,
    "disk.csi.azure.com": _RWO_BLOCK,
    "file.csi.azure.com": _RWX_FILE,
    "pd.csi.storage.gke.io": _RWO_BLOCK,
    "cinder.csi.openstack.org": _RWO_BLOCK,
    "manila.csi.openstack.org": _RWX_FILE,
    "csi.vsphere.vmware.com": _RWO_BLOCK,
    "csi.ovirt.org": _RWO_BLOCK,
    "driver.longhorn.io": _RWO_BLOCK,
    "pxd.portworx.com": _RWX_BLOCK,
    "kubesan.gitlab.io": _RWX_BLOCK,
}
"""The most capable claim a provisioner is known to offer, of those CDI's StorageProfile
lists for it by default."""


def claim_modes(storage_class: StorageClass) -> ClaimModes:
    """The volume mode and access mode of the class's claims."""
    if storage_class.local:
        return ClaimModes(storage_class.local_parameters.type.value)
    profile = PROFILES.get(storage_class.provisioner, _RWO_FILE)
    notes = storage_class.metadata.annotations
    volume_mode = VOLUME_MODES.get(notes.get(VOLUME_MODE_ANNOTATION, ""), profile.type)
    access_mode = notes.get(ACCESS_MODE_ANNOTATION, "")
    return ClaimModes(
        volume_mode, access_mode if access_mode in ACCESS_MODES else profile.access_mode
    )
