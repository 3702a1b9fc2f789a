"""A VM's first-boot configuration, as Deckhouse gives it: cloud-init user data (inline or from a
Secret) on a NoCloud `cidata` CD-ROM, or a Secret's Windows answer files on a CD-ROM of their
own; a VM whose Secret is missing waits for it."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

from reconcile_support import Daemon
from vm_support import create_vm, daemon, read_node, ready_disk

from diskferry.control.resources.core import SECRETS

__all__ = ["daemon"]
USER_DATA = "#cloud-config\nusers:\n  - name: cloud\n"


def secret(daemon: Daemon, name: str, data: dict[str, str], kind: str = "Opaque") -> None:
    """A Secret in the default namespace."""
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": kind}
    daemon.objects.create(SECRETS, "default", {**body, "data": encoded})


def provisioned(daemon: Daemon, name: str, provisioning: dict[str, Any]) -> dict[str, Any]:
    """The status of a running VM with `provisioning`."""
    ready_disk(daemon, f"vd-{name}")
    refs = [{"kind": "VirtualDisk", "name": f"vd-{name}"}]
    spec = {"runPolicy": "AlwaysOn", "blockDeviceRefs": refs, "memory": {"size": "64Mi"}}
    create_vm(daemon, name, {**spec, "provisioning": provisioning}, {})
    vm = daemon.wait_phase("VirtualMachine", name, "Running", "Pending", "Degraded", timeout=60)
    assert vm["status"]["phase"] == "Running", vm["status"]
    return vm["status"]


def iso_files(image: bytes, folder: Path) -> tuple[str, dict[str, bytes]]:
    """The volume id of the ISO `image` and the files at its root."""
    path = folder / "seed.iso"
    path.write_bytes(image)
    out = folder / "out"
    subprocess.run(
        ["xorriso", "-osirrox", "on", "-indev", str(path), "-extract", "/", str(out)],
        check=True,
        capture_output=True,
    )
    volume_id = image[0x8028:0x8048].decode().strip()
    return volume_id, {p.name: p.read_bytes() for p in out.iterdir()}


def test_user_data_reaches_the_guest_on_a_cidata_cdrom(daemon: Daemon, tmp_path: Path) -> None:
    status = provisioned(daemon, "vm-u", {"type": "UserData", "userData": USER_DATA})
    label, files = iso_files(read_node(status["qmpSocket"], "provisioning"), tmp_path)
    assert label.lower() == "cidata"
    assert files["user-data"].decode() == USER_DATA
    meta = files["meta-data"].decode()
    uid = daemon.get("VirtualMachine", "vm-u")["metadata"]["uid"]
    assert f"instance-id: {uid}" in meta and "local-hostname: vm-u" in meta
    seed = daemon.data_dir / "vms/default/vm-u/provisioning.iso"
    assert seed.stat().st_mode & 0o777 == 0o600


def test_user_data_from_a_secret(daemon: Daemon, tmp_path: Path) -> None:
    kind = "provisioning.virtualization.deckhouse.io/cloud-init"
    secret(daemon, "cloud", {"userData": USER_DATA}, kind)
    provisioning = {"type": "UserDataRef", "userDataRef": {"kind": "Secret", "name": "cloud"}}
    status = provisioned(daemon, "vm-r", provisioning)
    _, files = iso_files(read_node(status["qmpSocket"], "provisioning"), tmp_path)
    assert files["user-data"].decode() == USER_DATA


def test_sysprep_answer_files_from_a_secret(daemon: Daemon, tmp_path: Path) -> None:
    answers = {"autounattend.xml": "<unattend/>", "unattend.xml": "<unattend mode='oobe'/>"}
    secret(daemon, "answers", answers, "provisioning.virtualization.deckhouse.io/sysprep")
    provisioning = {"type": "SysprepRef", "sysprepRef": {"kind": "Secret", "name": "answers"}}
    status = provisioned(daemon, "vm-w", provisioning)
    _, files = iso_files(read_node(status["qmpSocket"], "provisioning"), tmp_path)
    assert {k: v.decode() for k, v in files.items()} == answers


def test_a_vm_whose_provisioning_secret_is_missing_waits_for_it(daemon: Daemon) -> None:
    ready_disk(daemon, "vd-m")
    refs = [{"kind": "VirtualDisk", "name": "vd-m"}]
    provisioning = {"type": "UserDataRef", "userDataRef": {"kind": "Secret", "name": "later"}}
    spec = {"runPolicy": "AlwaysOn", "blockDeviceRefs": refs, "provisioning": provisioning}
    create_vm(daemon, "vm-m", spec, {})
    vm = daemon.wait_phase("VirtualMachine", "vm-m", "Pending", "Running", timeout=60)
    assert vm["status"]["phase"] == "Pending"
    ready = next(c for c in vm["status"]["conditions"] if c["type"] == "ProvisioningReady")
    assert ready["status"] == "False" and "Secret later" in ready["message"]
    secret(daemon, "later", {"userData": USER_DATA})
    vm = daemon.wait_phase("VirtualMachine", "vm-m", "Running", timeout=60)
    ready = next(c for c in vm["status"]["conditions"] if c["type"] == "ProvisioningReady")
    assert ready["status"] == "True"
