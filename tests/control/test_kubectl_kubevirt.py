"""KubeVirt's export and backup samples (tests/anchors/kubevirt), applied with kubectl to a real
`diskferry serve` unchanged but for their apiVersion: each is accepted and its flow works
(disks downloaded through the export proxy byte for byte, backups landed or served), or the
object says exactly what does not apply here; the VEP's draft backups are refused, naming the
fields KubeVirt's current API does not have either."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_support import stop_workers_under, wait_until
from daemon_support import Served, free_port, kubectl, start_daemon
from vmexport_support import get, get_when_up

from diskferry.backup.repository import Repository
from diskferry.base import procstat

SAMPLES = Path(__file__).resolve().parents[1] / "anchors" / "kubevirt"
TOKEN = "1234567890ab"
PASSWORD = "sample-repo-pass"
WAIT = "--timeout=90s"


@pytest.fixture(scope="module")
def daemon() -> Iterator[Served]:
    """One daemon with its controllers, on a directory short enough for the VMs' sockets."""
    base = Path(tempfile.mkdtemp(prefix="dfkv", dir="/tmp"))
    served = start_daemon(
        base / "data", base / "daemon.log", options=("--proxy-port", str(free_port()))
    )
    yield served
    try:
        assert served.stop() == 0
    finally:
        for state in base.glob("data/vms/*/*/state.json"):
            pid = json.loads(state.read_text())["pid"]
            if procstat.start_time(pid) is not None:
                os.kill(pid, signal.SIGKILL)
        stop_workers_under(base)
        shutil.rmtree(base, ignore_errors=True)


def apply(daemon: Served, sample: str, *args: str) -> str:
    """`kubectl apply` the sample file as it is."""
    return kubectl(daemon, "apply", "-f", str(SAMPLES / sample), *args)


def apply_text(daemon: Served, manifest: str) -> str:
    """`kubectl apply` a manifest of this test's own."""
    return kubectl(daemon, "apply", "-f", "-", stdin=manifest)


def get_json(daemon: Served, what: str, namespace: str = "default") -> dict[str, Any]:
    return json.loads(kubectl(daemon, "get", what, "-n", namespace, "-o", "json"))


def namespace(daemon: Served, name: str) -> None:
    """The namespace `name`, made when it is not there."""
    apply_text(daemon, f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n")


def wait_phase(daemon: Served, what: str, phase: str, namespace: str = "default") -> dict:
    """The object once its `status.phase` is `phase`."""
    jsonpath = f"--for=jsonpath={{.status.phase}}={phase}"
    assert "condition met" in kubectl(daemon, "wait", what, "-n", namespace, jsonpath, WAIT)
    return get_json(daemon, what, namespace)


def ca_pem(daemon: Served) -> str:
    return (daemon.data_dir / "pki" / "ca.crt").read_text()


def claim_bytes(daemon: Served, disk: dict[str, Any]) -> bytes:
    """The bytes of a Ready VirtualDisk's claim."""
    status, namespace = disk["status"], disk["metadata"]["namespace"]
    name = status["target"]["persistentVolumeClaimName"]
    path = daemon.data_dir / "volumes" / status["storageClassName"] / namespace / f"{name}.img"
    return path.read_bytes()


def http_disk(daemon: Served, nginx: Any, images: Any, name: str, namespace: str) -> dict:
    """A VirtualDisk imported from the reference image over HTTP, once Ready."""
    url = nginx.publish(images.reference, f"kubevirt-{namespace}-{name}.img")
    apply_text(
        daemon,
        f"""\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  dataSource: {{type: HTTP, http: {{url: "{url}"}}}}
""",
    )
    return wait_phase(daemon, f"vd/{name}", "Ready", namespace)


def downloads(daemon: Served, export: dict[str, Any], expected: dict[str, bytes]) -> None:
    """Each volume of the export's external link, through the proxy with the sample's token,
    is `expected`'s bytes."""
    external = export["status"]["links"]["external"]
    assert sorted(v["name"] for v in external["volumes"]) == sorted(expected)
    for volume in external["volumes"]:
        url = next(f["url"] for f in volume["formats"] if f["format"] == "raw")
        assert "/api/export.kubevirt.io/v1/" in url
        assert get_when_up(url, ca_pem(daemon), TOKEN) == (200, expected[volume["name"]])


def delete(daemon: Served, what: str, namespace: str = "default") -> None:
    kubectl(daemon, "delete", what, "-n", namespace, "--wait=true", WAIT)


def test_exports_of_a_pvc_and_of_a_vm(daemon: Served, nginx, images) -> None:
    assert "secret/example-token created" in apply(daemon, "export-token-secret.yaml")
    disk = http_disk(daemon, nginx, images, "example-pvc", "default")
    data = claim_bytes(daemon, disk)

    assert "created" in apply(daemon, "vmexport-pvc.yaml")
    export = wait_phase(daemon, "vmexport/example-export", "Ready")
    assert export["status"]["tokenSecretRef"] == "example-token"
    downloads(daemon, export, {"example-pvc": data})
    delete(daemon, "vmexport/example-export")

    apply_text(
        daemon,
        """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualMachine
metadata: {name: example-vm, namespace: default}
spec:
  runPolicy: AlwaysOff
  blockDeviceRefs: [{kind: VirtualDisk, name: example-pvc}]
  memory: {size: 64Mi}
""",
    )
    wait_phase(daemon, "vm/example-vm", "Stopped")
    for sample, ttl in (
        ("vmexport-vm.yaml", timedelta(hours=2)),
        ("vmexport-vm-ttl.yaml", timedelta(hours=1)),
    ):
        apply(daemon, sample)
        export = wait_phase(daemon, "vmexport/example-export", "Ready")
        status = export["status"]
        assert status["virtualMachineName"] == "example-vm"
        created = datetime.fromisoformat(export["metadata"]["creationTimestamp"])
        assert datetime.fromisoformat(status["ttlExpirationTime"]) - created == ttl
        downloads(daemon, export, {"example-pvc": data})
        manifests = {m["type"] for m in status["links"]["external"]["manifests"]}
        assert manifests == {"all", "auth-header-secret"}
        delete(daemon, "vmexport/example-export")
    delete(daemon, "vm/example-vm")


def test_the_export_with_kubevirts_status_gets_its_own(daemon: Served, nginx, images) -> None:
    namespace(daemon, "example")
    apply(daemon, "export-token-secret.yaml", "-n", "example")
    disk = http_disk(daemon, nginx, images, "example-pvc", "example")
    assert "created" in apply(daemon, "vmexport-pvc-status-kubevirt.yaml")
    export = wait_phase(daemon, "vmexport/example-export", "Ready", "example")
    external = export["status"]["links"]["external"]
    assert external["cert"] == ca_pem(daemon)
    assert export["status"]["serviceName"] == "virt-export-example-export"
    downloads(daemon, export, {"example-pvc": claim_bytes(daemon, disk)})
    delete(daemon, "vmexport/example-export", "example")


@pytest.mark.parametrize(
    ("sample", "says"),
    [
        ("vmexport-vmsnapshot.yaml", "there is no VirtualMachineSnapshot kind here"),
        ("vmexport-vmtemplate.yaml", "there is no VirtualMachineTemplate kind here"),
    ],
)
def test_exports_of_kinds_with_no_counterpart_say_so(
    daemon: Served, sample: str, says: str
) -> None:
    assert "created" in apply(daemon, sample)
    export = wait_phase(daemon, "vmexport/example-export", "Skipped")
    (ready,) = export["status"]["conditions"]
    assert ready["reason"] == "SourceNotServed" and says in ready["message"]
    assert not export["status"].get("links")
    described = kubectl(daemon, "get", "vmexport", "example-export").splitlines()
    assert described[0].split()[:3] == ["NAME", "SOURCEKIND", "SOURCENAME"]
    delete(daemon, "vmexport/example-export")


def backup_setup(daemon: Served) -> Path:
    """Namespace ns1 with the VM my-vm running on a CBT disk, the token Secret my-token, and the
    repository password; the folder the location backup-output-pvc will use."""
    namespace(daemon, "ns1")
    apply_text(
        daemon,
        f"""\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: my-volume, namespace: ns1}}
spec:
  persistentVolumeClaim: {{size: 16Mi}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualMachine
metadata:
  name: my-vm
  namespace: ns1
  labels: {{diskferry.io/changed-block-tracking: "true"}}
spec:
  runPolicy: AlwaysOn
  blockDeviceRefs: [{{kind: VirtualDisk, name: my-volume}}]
  memory: {{size: 64Mi}}
  terminationGracePeriodSeconds: 0  # no guest OS to power off on an ACPI request
---
apiVersion: v1
kind: Secret
metadata: {{name: my-token, namespace: ns1}}
stringData: {{token: "{TOKEN}"}}
---
apiVersion: v1
kind: Secret
metadata: {{name: repo-pass, namespace: ns1}}
stringData: {{password: "{PASSWORD}"}}
""",
    )
    jsonpath = "--for=jsonpath={.status.changedBlockTracking.state}=Enabled"
    kubectl(daemon, "wait", "vm/my-vm", "-n", "ns1", jsonpath, WAIT)
    wait_phase(daemon, "vm/my-vm", "Running", "ns1")
    return daemon.data_dir.parent / "backup-output"


def location(daemon: Served, directory: Path) -> None:
    """The BackupStorageLocation backup-output-pvc: the PVC of KubeVirt's samples."""
    apply_text(
        daemon,
        f"""\
apiVersion: diskferry.io/v1alpha1
kind: BackupStorageLocation
metadata: {{name: backup-output-pvc, namespace: ns1}}
spec:
  provider: filesystem
  objectStorage: {{bucket: "{directory}"}}
  encryptionSecretRef: {{name: repo-pass, key: password}}
""",
    )


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"].get("conditions") or []}


def test_backup_samples(daemon: Served) -> None:
    directory = backup_setup(daemon)
    for sample in ("vmbackuptracker-tests.yaml", "vmbackuptracker.yaml"):
        assert "my-backup-tracker" in apply(daemon, sample, "-n", "ns1")
    tracker = get_json(daemon, "vmbackuptracker/my-backup-tracker", "ns1")
    assert tracker["spec"]["source"]["apiGroup"] == "kubevirt.io"
    lines = kubectl(daemon, "get", "vmbackuptracker", "-n", "ns1").splitlines()
    assert lines[0].split()[:3] == ["NAME", "SOURCEKIND", "SOURCENAME"]

    # Push from the VM into pvcName: waits for the location of that name, then lands in it
    assert "created" in apply(daemon, "vmbackup-push-vm-tests.yaml")
    waiting = wait_phase(daemon, "vmbackup/backup1", "Pending", "ns1")
    said = conditions(waiting)["Progressing"]
    assert said["reason"] == "Initializing" and "backup-output-pvc (pvcName)" in said["message"]
    location(daemon, directory)
    pushed = wait_phase(daemon, "vmbackup/backup1", "Complete", "ns1")
    assert pushed["status"]["type"] == "Full"
    delete(daemon, "vmbackup/backup1", "ns1")

    # Push through the tracker: its checkpoint becomes the tracker's
    assert "created" in apply(daemon, "vmbackup-push-tracker-tests.yaml")
    tracked = wait_phase(daemon, "vmbackup/backup1", "Complete", "ns1")
    tracker = get_json(daemon, "vmbackuptracker/my-backup-tracker", "ns1")
    assert tracker["status"]["latestCheckpoint"]["name"] == tracked["status"]["checkpointName"]
    columns = kubectl(daemon, "get", "vmbackup", "-n", "ns1").splitlines()
    header, row = columns[0].split(), columns[1].split()
    assert header[:5] == ["NAME", "SOURCEKIND", "SOURCENAME", "TYPE", "CHECKPOINTNAME"]
    assert row[4] == tracked["status"]["checkpointName"]
    with Repository.open(str(directory), PASSWORD) as repo:
        assert len(repo.list_snapshots()) == 2
    delete(daemon, "vmbackup/backup1", "ns1")

    # Pull through the tracker, with the token Secret: served through an export of itself
    assert "created" in apply(daemon, "vmbackup-pull-tracker-tests.yaml")
    pulled = wait_phase(daemon, "vmbackup/backup1", "Ready", "ns1")
    export = get_json(daemon, "vmexport/backup1", "ns1")
    assert pulled["status"]["exportUID"] == export["metadata"]["uid"]
    assert export["status"]["links"]["external"]["backups"][0]["name"] == "my-volume"
    (volume,) = pulled["status"]["includedVolumes"]
    code, body = get_when_up(volume["mapEndpoint"], ca_pem(daemon), TOKEN)
    assert code == 200 and json.loads(body)["extents"]
    disk = get_json(daemon, "vd/my-volume", "ns1")
    assert get(volume["dataEndpoint"], ca_pem(daemon), TOKEN) == (200, claim_bytes(daemon, disk))
    delete(daemon, "vmbackup/backup1", "ns1")
    wait_until(
        lambda: "NotFound" in kubectl_fails(daemon, "get", "vmexport/backup1", "-n", "ns1"), 30
    )


def kubectl_fails(daemon: Served, *args: str) -> str:
    """kubectl's output of a command that fails."""
    return kubectl(daemon, *args, ok=False)


@pytest.mark.parametrize("sample", ["vmbackup-pull.yaml", "vmbackup-push.yaml"])
def test_the_veps_draft_backups_are_refused_as_kubevirt_refuses_them(
    daemon: Served, sample: str
) -> None:
    namespace(daemon, "ns1")
    said = kubectl(daemon, "apply", "-f", str(SAMPLES / sample), ok=False)
    draft = yaml.safe_load((SAMPLES / sample).read_text())
    assert draft["spec"]["mode"] in ("push", "pull")
    assert "spec.backupTracker: unknown field" in said
    assert "spec.source: Field required" in said
    assert "spec.mode: Input should be 'Push' or 'Pull'" in said
