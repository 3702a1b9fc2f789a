"""The manifests an export serves, as KubeVirt's virt-exportserver serves them: a v1 List in JSON,
or YAML documents each ended by `---` when the client accepts application/yaml (as virtctl
asks); the header Secret CDI reads; the VM's manifest with each disk's HTTP source pointed at
this export's gzip URL on the side asked (internal or external), behind the token, trusting
that side's CA."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml
from export_support import TOKEN, curl
from server_support import Running

AUTH = f"x-kubevirt-export-token: {TOKEN}"
YAML = "Accept: application/yaml"
INTERNAL = "https://vm1.ns.svc:8443"
EXTERNAL = "https://proxy.example/api/export.kubevirt.io/v1/namespaces/ns/virtualmachineexports/vm1"
SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "header-secret-vm1"},
    "stringData": {"token": f"x-kubevirt-export-token:{TOKEN}"},
}
VM = {
    "apiVersion": "diskferry.io/v1alpha1",
    "kind": "VirtualMachine",
    "metadata": {"name": "vm1", "namespace": "ns"},
    "spec": {
        "runPolicy": "AlwaysOff",
        "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "disk"}],
    },
}
DISK = {
    "apiVersion": "diskferry.io/v1alpha1",
    "kind": "VirtualDisk",
    "metadata": {"name": "disk", "namespace": "ns"},
    "spec": {
        "persistentVolumeClaim": {"size": "24Mi"},
        "dataSource": {"type": "HTTP", "http": {"url": "volumes/disk/disk.img.gz"}},
    },
}


def _get(r: Running, path: str, *args: str) -> bytes:
    return curl("--fail", "-H", AUTH, *args, r.url + path, ca=r.ca).stdout


def _yaml(body: bytes) -> list[dict[str, Any]]:
    """The documents of a YAML body whose every document ends with `---`."""
    text = body.decode()
    assert text.endswith("---\n"), text
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def _json(body: bytes) -> list[dict[str, Any]]:
    """The items of a JSON v1 List."""
    listed = json.loads(body)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    return listed["items"]


def test_the_secret_manifest_is_kubevirts(export: Running) -> None:
    for side in ("internal", "external"):
        path = f"/{side}/manifests/secret"
        assert _json(_get(export, path)) == [SECRET]
        assert _yaml(_get(export, path, "-H", YAML)) == [SECRET]


def test_the_vm_manifest_points_its_disks_at_the_side_asked(
    export_factory, disk: Path, tmp_path: Path, ca_dir: Path
) -> None:
    manifest = tmp_path / "vm.yaml"
    manifest.write_text(yaml.safe_dump_all([VM, DISK]))
    outside = tmp_path / "proxy-ca.crt"
    outside.write_text("-----BEGIN CERTIFICATE-----\nproxy\n-----END CERTIFICATE-----\n")
    r = export_factory(
        {"disk": disk},
        "--manifest",
        str(manifest),
        "--internal-url",
        INTERNAL,
        "--external-url",
        EXTERNAL,
        "--external-ca",
        str(outside),
    )
    for side, base, ca in (
        ("internal", INTERNAL, (ca_dir / "ca.crt").read_text()),
        ("external", EXTERNAL, outside.read_text()),
    ):
        path = f"/{side}/manifests/all"
        vm, pointed = _yaml(_get(r, path, "-H", YAML))
        assert _json(_get(r, path)) == [vm, pointed]
        assert vm == VM
        http = pointed["spec"]["dataSource"]["http"]
        assert http == {
            "url": f"{base}/volumes/disk/disk.img.gz?x-kubevirt-export-token={TOKEN}",
            "caBundle": base64.b64encode(ca.encode()).decode(),
        }
        assert {
            **pointed,
            "spec": {**pointed["spec"], "dataSource": DISK["spec"]["dataSource"]},
        } == DISK
