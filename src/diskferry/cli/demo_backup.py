"""The demo's backup and restore, all through the daemon: a VirtualMachine on the imported disk
with changed-block tracking, a BackupStorageLocation whose password is in a Secret, a full
Backup, writes into the disk through the VM's QMP socket, an incremental Backup, and each
point restored into a namespace of its own and compared byte for byte with a copy of the disk
kept at that point. The VMs are set AlwaysOff at the end, so that no QEMU outlives the demo."""

from __future__ import annotations

import filecmp
import subprocess
from pathlib import Path
from typing import Any

from diskferry.cli.common import note
from diskferry.cli.demo_steps import (
    DISKFERRY,
    STEP_SECONDS,
    DemoError,
    apply,
    get_object,
    watched,
)
from diskferry.control.host.embedded.machines import QemuMachines
from diskferry.control.host.embedded.volumes import DirectoryVolumes
from diskferry.control.host.volumes import VolumeClass
from diskferry.control.resources.virtualmachine import CBT_LABEL
from diskferry.disk import clone_volume
from diskferry.qemu import Qmp

PASSWORD = "diskferry-demo"
VM, SECRET, LOCATION = "demo-vm", "demo-repo-password", "demo-repo"
POINTS = (1, 2)
WRITES = 16


def restored_namespace(point: int) -> str:
    """The namespace the backup of `point` is restored into."""
    return f"restored-{point}"


def namespaces() -> list[str]:
    """Every namespace the demo runs its VM in."""
    return ["default", *map(restored_namespace, POINTS)]


def check_socket_paths(data_dir: Path) -> None:
    """Refuse, before anything is made, a data directory too deep for the VMs' Unix sockets."""
    for namespace in namespaces():
        QemuMachines(data_dir).check_paths(namespace, VM)


def _vm(disk: str, run_policy: str, namespace: str = "default") -> str:
    return f"""\
apiVersion: diskferry.io/v1alpha1
kind: VirtualMachine
metadata:
  name: {VM}
  namespace: {namespace}
  labels: {{app: demo, {CBT_LABEL}: "true"}}
spec:
  runPolicy: {run_policy}
  memory: {{size: 64Mi}}
  terminationGracePeriodSeconds: 0  # the demo's guest has no OS to power off on ACPI's request
  blockDeviceRefs: [{{kind: VirtualDisk, name: {disk}}}]
"""


def _location(repository: Path, disk: str) -> str:
    """The repository's password in a Secret, the location on it, and the VM."""
    return f"""\
apiVersion: v1
kind: Secret
metadata: {{name: {SECRET}}}
stringData: {{password: {PASSWORD}}}
---
apiVersion: diskferry.io/v1alpha1
kind: BackupStorageLocation
metadata: {{name: {LOCATION}}}
spec:
  provider: filesystem
  objectStorage: {{bucket: {repository}}}
  encryptionSecretRef: {{name: {SECRET}, key: password}}
---
{_vm(disk, "AlwaysOn")}"""


def _backup(point: int) -> str:
    return f"""\
apiVersion: diskferry.io/v1alpha1
kind: Backup
metadata: {{name: demo-{point}}}
spec:
  includedNamespaces: [default]
  labelSelector: {{matchLabels: {{app: demo}}}}
  storageLocation: {LOCATION}
"""


def _restores() -> str:
    return "---\n".join(
        f"""\
apiVersion: diskferry.io/v1alpha1
kind: Restore
metadata: {{name: demo-{point}}}
spec:
  backupName: demo-{point}
  namespaceMapping: {{default: {restored_namespace(point)}}}
"""
        for point in POINTS
    )


def _disk_file(kubeconfig: Path, data_dir: Path, namespace: str, name: str) -> Path:
    """The file of the VirtualDisk `namespace/name`, as the daemon's file StorageClass keeps it."""
    status = get_object(kubeconfig, "vd", name, namespace)["status"]
    volume_class = VolumeClass(status["storageClassName"])
    claim = DirectoryVolumes(data_dir).find(
        volume_class, namespace, status["target"]["persistentVolumeClaimName"]
    )
    if claim is None:
        raise DemoError(f"the claim of the VirtualDisk {namespace}/{name} is missing")
    return claim.file


def _write(vm: dict[str, Any], disk: str) -> None:
    """Scattered 64 KiB writes into the VM's disk through QMP, as a guest would make them."""
    target = vm["blockDevices"][0]["target"]
    with Qmp(vm["qmpSocket"]) as qmp:
        for i in range(WRITES):
            io = f"write -P {0x40 + i} {i * 7 + 3}M 64k"
            said = qmp.command("human-monitor-command", command_line=f'qemu-io -d {target} "{io}"')
            if said.strip():  # qemu-io through HMP says nothing when it wrote
                raise DemoError(f"qemu-io {io} on {target}: {said.strip()}")
    note(
        f"wrote {WRITES} scattered 64 KiB blocks into {disk} through {VM}'s QMP socket "
        f'(human-monitor-command: qemu-io -d {target} "write ...")'
    )


def _back_up(kubeconfig: Path, workdir: Path, point: int) -> None:
    """Apply the Backup of `point`, watch its DataUpload, and say what it did, as its status
    has it; a second backup that is not incremental is a DemoError."""
    name = f"demo-{point}"
    apply(kubeconfig, workdir / f"backup-{point}.yaml", _backup(point))
    watched(kubeconfig, "dataupload", [("backup", name, "Completed", None)])
    upload = get_object(kubeconfig, "backup", name)["status"]["volumes"][0]["dataUpload"]
    [disk] = get_object(kubeconfig, "dataupload", upload)["status"]["disks"]
    note(
        f"backup {point}: {disk['type']} ({disk['reason']}), read {disk['bytesRead']} bytes, "
        f"uploaded {disk['bytesUploaded']} bytes (the DataUpload {upload})"
    )
    if point > 1 and disk["type"] != "incremental":
        raise DemoError(f"backup {point} was {disk['type']}, not incremental")


def _start_vm(kubeconfig: Path, workdir: Path, disk: str) -> dict[str, Any]:
    """Apply the location, its Secret and the VM; the VM's status once it runs with CBT."""
    repository = workdir / "backups"
    note(
        f"a VirtualMachine {VM} on {disk}, labelled {CBT_LABEL}: true, and a "
        f"BackupStorageLocation {LOCATION} in {repository}, its password in the Secret {SECRET}"
    )
    apply(kubeconfig, workdir / "vm.yaml", _location(repository, disk))
    watched(kubeconfig, "vm", [("vm", VM, "Running", None), ("bsl", LOCATION, "Available", None)])
    vm = get_object(kubeconfig, "vm", VM)["status"]
    tracking = vm["changedBlockTracking"]["state"]
    if tracking != "Enabled":
        raise DemoError(f"changed-block tracking of {VM} is {tracking}, not Enabled")
    note(f"{VM} runs (qemu-system-x86_64, no guest OS); changed-block tracking {tracking}")
    note(f"backup repository {repository}, password {PASSWORD} (in the Secret {SECRET})")
    return vm


def _restore(
    kubeconfig: Path, workdir: Path, data_dir: Path, disk: str, copies: dict[int, Path]
) -> None:
    """Restore each point into its namespace and compare its disk with the copy of that point."""
    apply(kubeconfig, workdir / "restore.yaml", _restores())
    restores = [("restore", f"demo-{point}", "Completed", None) for point in POINTS]
    watched(kubeconfig, "datadownload", restores)
    for point, copy in copies.items():
        namespace = restored_namespace(point)
        restored = _disk_file(kubeconfig, data_dir, namespace, disk)
        if not filecmp.cmp(restored, copy, shallow=False):
            raise DemoError(f"{restored} differs from {disk} at backup {point} ({copy})")
        note(
            f"restore demo-{point} into namespace {namespace}: its {disk} is identical, byte "
            f"for byte, to {disk} at backup {point} (kept as {copy.name})"
        )


def backup_and_restore(kubeconfig: Path, workdir: Path, data_dir: Path, disk: str) -> None:
    """Run a VM on `disk` with CBT, back it up around writes, keeping a copy of the disk at
    each point, restore and compare each point, then set every VM AlwaysOff."""
    vm = _start_vm(kubeconfig, workdir, disk)
    source = _disk_file(kubeconfig, data_dir, "default", disk)
    copies = {}
    for point in POINTS:
        if point > 1:
            _write(vm, disk)
        copies[point] = workdir / f"{disk}-at-backup-{point}.img"
        clone_volume(str(source), str(copies[point]))
        _back_up(kubeconfig, workdir, point)
    _restore(kubeconfig, workdir, data_dir, disk, copies)
    _stop_all(kubeconfig, workdir, disk)


def _stop_all(kubeconfig: Path, workdir: Path, disk: str) -> None:
    """The restored VMs up again as they were backed up, then every VM set AlwaysOff."""
    everywhere = namespaces()
    restored = [("vm", VM, "Running", namespace) for namespace in everywhere[1:]]
    watched(kubeconfig, "vm", restored, all_namespaces=True)
    note(f"the restored {VM}s run, AlwaysOn as backed up; now every {VM} is set AlwaysOff")
    off = "---\n".join(_vm(disk, "AlwaysOff", namespace) for namespace in everywhere)
    apply(kubeconfig, workdir / "vms-off.yaml", off)
    stopped = [("vm", VM, "Stopped", namespace) for namespace in everywhere]
    watched(kubeconfig, "vm", stopped, all_namespaces=True)


def stop_jobs(data_dir: Path) -> None:
    """`diskferry serve --stop` on `data_dir`, when there is one: the demo's daemon, if it still
    runs, and every worker under it end, and are waited for. A daemon stopped by SIGTERM
    leaves its workers to the next one started on its data, and the demo's has no next one (a
    step that failed with an export, or its proxy, still serving)."""
    if data_dir.is_dir():
        stop = [*DISKFERRY, "serve", "--stop", "--data-dir", str(data_dir)]
        subprocess.run(stop, timeout=STEP_SECONDS, check=False)


def stop_machines(data_dir: Path) -> None:
    """End any VM's QEMU still running under `data_dir` once its daemon is gone (a step that
    failed before the VMs were set AlwaysOff)."""
    machines = QemuMachines(data_dir)
    for directory in sorted(machines.root.glob("*/*")):
        machines.stop(directory.parent.name, directory.name)
