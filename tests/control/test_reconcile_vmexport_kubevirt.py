"""VirtualMachineExports whose source KubeVirt wrote, end to end over the real store, workers and
export proxy: a PersistentVolumeClaim (by its claim's name, or by its VirtualDisk's) and a
`kubevirt.io` VirtualMachine are downloaded through the proxy byte for byte, and the VM's
manifest makes the VM and its disks again elsewhere; a VM snapshot and a template are Skipped,
saying what to export instead."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from control_support import wait_until
from vmexport_support import ExportDaemon, connect, get, get_when_up, raw_url

from diskferry.control.errors import NotFoundError
from diskferry.control.host.servers import free_port
from diskferry.control.resources.core import NAMESPACES
from diskferry.export.token import TOKEN_HEADER

EXPORT = "VirtualMachineExport"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ExportDaemon]:
    running = ExportDaemon(tmp_path / "data", free_port())
    yield running
    running.stop()
    running.stop_workers()


def _export(daemon: ExportDaemon, name: str, source: dict[str, str]) -> dict[str, Any]:
    """The export of `source`, once Ready or Skipped."""
    daemon.apply(EXPORT, name, {"source": source})
    return daemon.wait_phase(EXPORT, name, "Ready", "Skipped", timeout=60)


def _downloads(daemon: ExportDaemon, export: dict[str, Any], expected: dict[str, bytes]) -> None:
    """Each volume of the export's external link, through the proxy under KubeVirt's current
    `export.kubevirt.io/v1` paths as the link has them and under `v1beta1`, is `expected`'s."""
    assert export["status"]["phase"] == "Ready", export["status"]
    token = daemon.token(export["status"]["tokenSecretRef"])
    external = export["status"]["links"]["external"]
    assert sorted(v["name"] for v in external["volumes"]) == sorted(expected)
    for volume in external["volumes"]:
        url = next(f["url"] for f in volume["formats"] if f["format"] == "raw")
        assert url.startswith(f"{daemon.controllers.proxy.base_url}/api/export.kubevirt.io/v1/")
        assert get_when_up(url, external["cert"], token) == (200, expected[volume["name"]])
        beta = url.replace("/export.kubevirt.io/v1/", "/export.kubevirt.io/v1beta1/")
        assert get(beta, external["cert"], token) == (200, expected[volume["name"]])


def _manifest(url: str, ca_pem: str, token: str) -> list[dict[str, Any]]:
    """The YAML documents a manifest link serves, asked for as virtctl asks."""
    conn = connect(url, ca_pem)
    try:
        headers = {TOKEN_HEADER: token, "Accept": "application/yaml"}
        conn.request("GET", urlsplit(url).path, headers=headers)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert response.status == 200, body
    return [doc for doc in yaml.safe_load_all(body) if doc]


def _phase(daemon: ExportDaemon, namespace: str, name: str, *phases: str) -> dict[str, Any] | None:
    """The VirtualDisk once its phase is one of `phases`."""
    try:
        disk = daemon.objects.get(daemon.registry.by_kind("VirtualDisk"), namespace, name)
    except NotFoundError:
        return None
    return disk if disk.get("status", {}).get("phase") in phases else None


def test_a_pvc_is_the_virtualdisk_whose_claim_or_name_it_is(daemon, nginx, images) -> None:
    disk = daemon.ready_disk(nginx, images.reference)
    data = daemon.claim(disk).read_bytes()
    claim = disk["status"]["target"]["persistentVolumeClaimName"]
    assert claim != "vd1"
    by_claim = _export(
        daemon, "by-claim", {"apiGroup": "", "kind": "PersistentVolumeClaim", "name": claim}
    )
    _downloads(daemon, by_claim, {claim: data})
    assert raw_url(by_claim["status"]["links"]["external"]).endswith(f"/volumes/{claim}/disk.img")
    by_name = _export(daemon, "by-name", {"kind": "PersistentVolumeClaim", "name": "vd1"})
    _downloads(daemon, by_name, {"vd1": data})

    missing = {"kind": "PersistentVolumeClaim", "name": "nothing"}
    daemon.apply(EXPORT, "none", {"source": missing})
    pending = daemon.wait_phase(EXPORT, "none", "Pending", timeout=30)
    assert "PersistentVolumeClaim nothing" in pending["status"]["conditions"][0]["message"]


def test_a_kubevirt_vm_is_the_virtualmachine_and_its_disks(daemon, nginx, images) -> None:
    disk = daemon.ready_disk(nginx, images.reference)
    daemon.apply("VirtualDisk", "vd2", {"persistentVolumeClaim": {"size": "4Mi"}})
    blank = daemon.wait_phase("VirtualDisk", "vd2", "Ready", timeout=30)
    refs = [{"kind": "VirtualDisk", "name": name} for name in ("vd1", "vd2")]
    spec = {"runPolicy": "AlwaysOff", "blockDeviceRefs": refs, "memory": {"size": "64Mi"}}
    daemon.apply("VirtualMachine", "vm1", spec)
    daemon.wait_phase("VirtualMachine", "vm1", "Stopped", timeout=30)
    export = _export(
        daemon, "vm", {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm1"}
    )
    assert export["status"]["virtualMachineName"] == "vm1"
    expected = {"vd1": daemon.claim(disk).read_bytes(), "vd2": daemon.claim(blank).read_bytes()}
    _downloads(daemon, export, expected)

    # the VM and its disks, as a user applies them elsewhere: here, in another namespace
    external = export["status"]["links"]["external"]
    urls = {m["type"]: m["url"] for m in external["manifests"]}
    token = daemon.token(export["status"]["tokenSecretRef"])
    documents = _manifest(urls["all"], external["cert"], token)
    documents += _manifest(urls["auth-header-secret"], external["cert"], token)
    assert [(d["kind"], d["metadata"]["name"]) for d in documents] == [
        ("VirtualMachine", "vm1"),
        ("VirtualDisk", "vd1"),
        ("VirtualDisk", "vd2"),
        ("Secret", "header-secret-vm"),
    ]
    assert documents[0]["spec"] == daemon.get("VirtualMachine", "vm1")["spec"]
    daemon.objects.create(NAMESPACES, None, {"metadata": {"name": "copy"}})
    for document in documents:
        document["metadata"]["namespace"] = "copy"
        daemon.objects.create(daemon.registry.by_kind(document["kind"]), "copy", document)
    for name, data in expected.items():
        made = wait_until(lambda name=name: _phase(daemon, "copy", name, "Ready", "Failed"), 60)
        assert made["status"]["phase"] == "Ready", made["status"]
        status = made["status"]
        claim = status["target"]["persistentVolumeClaimName"]
        path = daemon.data_dir / "volumes" / status["storageClassName"] / "copy" / f"{claim}.img"
        assert path.read_bytes() == data


@pytest.mark.parametrize(
    ("source", "says"),
    [
        (
            {"apiGroup": "snapshot.kubevirt.io", "kind": "VirtualMachineSnapshot", "name": "s1"},
            "there is no VirtualMachineSnapshot kind here",
        ),
        (
            {"apiGroup": "template.kubevirt.io", "kind": "VirtualMachineTemplate", "name": "t1"},
            "there is no VirtualMachineTemplate kind here",
        ),
    ],
)
def test_kinds_without_a_counterpart_are_skipped_saying_why(
    daemon: ExportDaemon, source: dict[str, str], says: str
) -> None:
    export = _export(daemon, "nope", source)
    status = export["status"]
    assert status["phase"] == "Skipped" and not status.get("links")
    (ready,) = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == (
        "Ready",
        "False",
        "SourceNotServed",
    )
    assert says in ready["message"]
    assert status["ttlExpirationTime"]
    assert daemon.export_jobs() == []
    assert ("default", "nope") not in daemon.controllers.proxy.routes()
