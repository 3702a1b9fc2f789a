"""A VirtualMachine on images kept in the image store, attached as Deckhouse attaches images:
read-only, as a CD-ROM when the image is an ISO, else as a disk; CBT on a stopped VM that names
one is not held back by it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from control_support import wait_until
from reconcile_support import Daemon
from vm_support import cbt_state, create_vm, daemon, hmp, read_node, ready_disk

from diskferry.control.resources.virtualimage import CLUSTER_VIRTUAL_IMAGES
from diskferry.qemu.qmp import Qmp

__all__ = ["daemon"]
PATTERN = b"\xab" * 4096


def iso(folder: Path) -> Path:
    """A small ISO 9660 image holding one file."""
    content = folder / "iso"
    content.mkdir()
    (content / "readme.txt").write_text("drivers\n")
    image = folder / "tools.iso"
    subprocess.run(
        ["xorrisofs", "-quiet", "-volid", "TOOLS", "-o", str(image), str(content)], check=True
    )
    return image


def stored_images(daemon: Daemon, nginx: Any, scratch: Path) -> None:
    """A VirtualImage in the store made from the VirtualDisk vd-src (PATTERN at 0), and a
    ClusterVirtualImage of an ISO."""
    with ready_disk(daemon, "vd-src").open("r+b") as f:
        f.write(PATTERN)
    source = {"type": "ObjectRef", "objectRef": {"kind": "VirtualDisk", "name": "vd-src"}}
    daemon.apply("VirtualImage", "vi-disk", {"dataSource": source})
    url = nginx.publish(iso(scratch), "tools.iso")
    body = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "ClusterVirtualImage",
        "metadata": {"name": "cvi-iso"},
        "spec": {"dataSource": {"type": "HTTP", "http": {"url": url}}},
    }
    daemon.objects.create(CLUSTER_VIRTUAL_IMAGES, None, body)
    image = daemon.wait_phase("VirtualImage", "vi-disk", "Ready", "Failed", timeout=120)
    assert image["status"]["phase"] == "Ready", image["status"]
    cvi = wait_until(
        lambda: (
            (o := daemon.objects.get(CLUSTER_VIRTUAL_IMAGES, None, "cvi-iso"))
            and o.get("status", {}).get("phase") in ("Ready", "Failed")
            and o
        ),
        120,
    )
    assert cvi["status"]["phase"] == "Ready" and cvi["status"]["cdrom"] is True, cvi["status"]


def test_store_images_attach_read_only_an_iso_as_a_cdrom(
    daemon: Daemon, nginx: Any, tmp_path: Path
) -> None:
    stored_images(daemon, nginx, tmp_path)
    ready_disk(daemon, "vd-boot")
    refs = [
        {"kind": "VirtualDisk", "name": "vd-boot"},
        {"kind": "VirtualImage", "name": "vi-disk"},
        {"kind": "ClusterVirtualImage", "name": "cvi-iso"},
    ]
    spec = {"runPolicy": "AlwaysOn", "blockDeviceRefs": refs, "memory": {"size": "64Mi"}}
    create_vm(daemon, "vm-s", spec, {})
    status = daemon.wait_phase("VirtualMachine", "vm-s", "Running", "Degraded", timeout=60)[
        "status"
    ]
    assert status["phase"] == "Running", status
    devices = {d["name"]: d for d in status["blockDevices"]}
    assert devices["vi-disk"]["readOnly"] is True and devices["cvi-iso"]["readOnly"] is True
    with Qmp(status["qmpSocket"]) as qmp:
        blocks = {b["qdev"]: b for b in qmp.command("query-block")}
    assert blocks["vd-vd-boot"]["removable"] is False
    assert blocks["vi-vi-disk"]["removable"] is False  # a disk, not a CD-ROM
    assert blocks["cvi-cvi-iso"]["removable"] is True  # the ISO is a CD-ROM
    assert blocks["vi-vi-disk"]["inserted"]["ro"] is True
    refused = hmp(status["qmpSocket"], 'qemu-io -d vi-vi-disk "write -P 0x11 0 4k"')
    assert "read-only" in refused
    assert read_node(status["qmpSocket"], "vi-vi-disk", 0, 4096) == PATTERN
    assert read_node(status["qmpSocket"], "cvi-cvi-iso", 32768, 6)[1:6] == b"CD001"


def test_a_stopped_vm_on_a_store_image_gets_cbt_and_says_what_it_waits_for(
    daemon: Daemon, nginx: Any, tmp_path: Path
) -> None:
    stored_images(daemon, nginx, tmp_path)
    ready_disk(daemon, "vd-c")
    refs = [{"kind": "VirtualDisk", "name": "vd-c"}, {"kind": "VirtualImage", "name": "vi-disk"}]
    labels = {"diskferry.io/changed-block-tracking": "true"}
    create_vm(daemon, "vm-c", {"runPolicy": "AlwaysOff", "blockDeviceRefs": refs}, labels)
    wait_until(lambda: cbt_state(daemon, "vm-c") == "Enabled", 30)

    refs.append({"kind": "VirtualImage", "name": "vi-missing"})
    create_vm(daemon, "vm-w", {"runPolicy": "AlwaysOff", "blockDeviceRefs": refs}, labels)
    vm = wait_until(lambda: cbt_state(daemon, "vm-w") and daemon.get("VirtualMachine", "vm-w"))
    assert vm["status"]["changedBlockTracking"]["state"] == "PendingRestart"
    ready = next(c for c in vm["status"]["conditions"] if c["type"] == "Ready")
    assert "VirtualImage vi-missing" in ready["message"], ready
