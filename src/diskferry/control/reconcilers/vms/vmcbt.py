"""Changed-block tracking of a VM's disks: whether it is wanted, and each disk made ready for it.

A VM gets CBT when the DataMoverConfig's `changedBlockTrackingLabelSelectors` select it (by
its labels or its namespace's) or when it carries the label `diskferry.io/changed-block-
tracking: "true"`. A disk is moved onto its CBT overlay by a worker's CBT job only while no
QEMU has it open: at the VM's next start, or at once when the VM is stopped. CBT no longer
wanted removes the overlays at that moment too, so that no write ever bypasses a bitmap
that would later claim to have seen every write. Whether a disk has its overlay is the host's
to say (`Volumes.tracked`). What a message about CBT tells a user to do is a change to a
manifest (`off_reason`).
"""

from __future__ import annotations

from diskferry.backup import CbtJob
from diskferry.control.host.volumes import Claim
from diskferry.control.reconcilers.datamover.moverconfig import load_config
from diskferry.control.resources.core import Namespace
from diskferry.control.resources.virtualmachine import CBT_LABEL, CbtState, VirtualMachine
from diskferry.control.runtime.client import Client


def wanted(client: Client, vm: VirtualMachine) -> bool:
    """Whether the VM's disks should be tracked."""
    if vm.metadata.labels.get(CBT_LABEL) == "true":
        return True
    selectors = load_config(client).changed_block_tracking_label_selectors
    if selectors is None:
        return False
    namespace = client.get(Namespace, None, vm.metadata.namespace or "")
    namespace_labels = namespace.metadata.labels if namespace is not None else {}
    return selectors.selects(vm.metadata.labels, namespace_labels)


def off_reason(client: Client, vm: VirtualMachine) -> str:
    """Why the VM's disks are not tracked, and what in the manifests turns tracking on."""
    who = f"VirtualMachine {vm.metadata.namespace}/{vm.metadata.name}"
    if wanted(client, vm):
        return (
            f"CBT is wanted on {who}, but its disks move onto CBT only at its next start "
            "(its changedBlockTracking.state is PendingRestart)"
        )
    return (
        f'CBT is off on {who}: label it {CBT_LABEL}: "true" (or select it with the '
        "DataMoverConfig's changedBlockTrackingLabelSelectors); its disks move onto CBT at "
        "once while it is stopped, else at its next start"
    )


def cbt_job(claim: Claim, track: bool) -> CbtJob:
    """The job that puts CBT on (`track`) or off the claim's raw volume."""
    return CbtJob(kind="cbtEnable" if track else "cbtDisable", volume=str(claim.file))


def cbt_job_id(vm: VirtualMachine, target: str) -> str:
    """The id of the CBT job of the VM's disk `target`."""
    return f"vm-cbt-{vm.metadata.uid}-{target}"


def state(track: bool, on_overlays: bool) -> CbtState:
    """The state shown: Enabled on overlays, PendingRestart while they wait for a start."""
    if on_overlays:
        return CbtState.ENABLED
    return CbtState.PENDING_RESTART if track else CbtState.DISABLED
