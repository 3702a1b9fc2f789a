"""kubectl drives VirtualMachines on a real `diskferry serve`; a killed daemon's VMs keep running
and the next daemon takes them over."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_support import wait_until
from daemon_support import Served, free_port, start_daemon

from diskferry.base import procstat

MANIFESTS = """\
apiVersion: diskferry.io/v1alpha1
kind: DataMoverConfig
metadata: {name: default}
spec: {maxConcurrentDataMovers: 2}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {name: vd-k, namespace: default}
spec:
  persistentVolumeClaim: {size: 16Mi}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualMachine
metadata: {name: vm-k, namespace: default}
spec:
  runPolicy: AlwaysOn
  blockDeviceRefs: [{kind: VirtualDisk, name: vd-k}]
  memory: {size: 64Mi}
  terminationGracePeriodSeconds: 0  # no guest OS to power off on an ACPI request
"""


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory short enough for the VMs' Unix socket paths under it."""
    path = Path(tempfile.mkdtemp(prefix="dfk", dir="/tmp"))
    yield path
    for state in path.glob("data/vms/*/*/state.json"):
        pid = json.loads(state.read_text())["pid"]
        if procstat.start_time(pid) is not None:
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def kubectl(daemon: Served, *args: str, stdin: str | None = None) -> str:
    """Run kubectl against the daemon; its stdout."""
    cache = str(daemon.data_dir.parent / "kube-cache")
    command = ["kubectl", "--kubeconfig", str(daemon.kubeconfig), "--cache-dir", cache, *args]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return done.stdout


def diskferry(daemon: Served, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the diskferry CLI against the daemon's data directory."""
    command = [
        sys.executable,
        "-m",
        "diskferry.cli.main",
        *args,
        "--data-dir",
        str(daemon.data_dir),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=90)


def qemu_pid(base: Path) -> int:
    """The pid of vm-k's QEMU."""
    return json.loads((base / "data/vms/default/vm-k/state.json").read_text())["pid"]


def test_kubectl_runs_a_vm_that_outlives_a_killed_daemon(base: Path) -> None:
    options = ("--proxy-port", str(free_port()))
    first = start_daemon(base / "data", base / "daemon.log", options=options)
    try:
        out = kubectl(first, "apply", "-f", "-", stdin=MANIFESTS)
        assert "virtualmachine.diskferry.io/vm-k created" in out
        assert "datamoverconfig.diskferry.io/default created" in out
        configs = kubectl(first, "get", "datamoverconfigs").splitlines()
        assert configs[0].split() == ["NAME", "MAXCONCURRENT", "MAXINCREMENTALS", "AGE"]
        assert configs[1].split()[:3] == ["default", "2", "0"]
        kubectl(first, "wait", "vm", "vm-k", "--for=jsonpath={.status.phase}=Running")
        kubectl(first, "wait", "vm", "vm-k", "--for=jsonpath={.status.stats.lastStartTime}")
        lines = kubectl(first, "get", "vm").splitlines()
        assert lines[0].split() == ["NAME", "PHASE", "UPTIME", "NODE", "IPADDRESS", "CBT", "AGE"]
        assert lines[1].split()[:2] == ["vm-k", "Running"]
        assert lines[1].split()[3] == socket.gethostname().lower()
        wide = kubectl(first, "get", "virtualmachines", "-o", "wide").splitlines()
        head = [c.strip() for c in re.split(r"\s{2,}", wide[0].strip())]
        assert head[2:10] == [
            "UPTIME",
            "CORES",
            "COREFRACTION",
            "MEMORY",
            "NEED RESTART",
            "AGENT",
            "MIGRATABLE",
            "NODE",
        ]
        assert "RUNPOLICY" in head and "QMP" in head
        row = [c.strip() for c in re.split(r"\s{2,}", wide[1].strip())]
        assert row[3:6] == ["1", "100%", "64Mi"]
        pid = qemu_pid(base)
        logged = diskferry(first, "logs", "vm", "vm-k")
        assert logged.returncode == 0, logged.stderr
        assert "qemu-system-x86_64 -name guest=default.vm-k" in logged.stdout
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    assert procstat.start_time(pid) is not None  # the VM did not go down with the daemon

    second = start_daemon(base / "data", base / "daemon.log", port=first.port, options=options)
    try:
        kubectl(second, "wait", "vm", "vm-k", "--for=jsonpath={.status.phase}=Running")
        assert qemu_pid(base) == pid  # taken over, not started twice
        off = '{"spec":{"runPolicy":"AlwaysOff"}}'
        kubectl(second, "patch", "vm", "vm-k", "--type=merge", "-p", off)
        kubectl(second, "wait", "vm", "vm-k", "--for=jsonpath={.status.phase}=Stopped")
        assert procstat.start_time(pid) is None
        kubectl(second, "delete", "vm", "vm-k")
        wait_until(lambda: not (base / "data/vms/default/vm-k").exists(), 30)
    finally:
        assert second.stop() == 0


IN_USE = """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {name: linux-disk, namespace: default}
spec:
  persistentVolumeClaim: {size: 16Mi}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualMachine
metadata: {name: linux-vm, namespace: default}
spec:
  runPolicy: AlwaysOn
  blockDeviceRefs: [{kind: VirtualDisk, name: linux-disk}]
  memory: {size: 64Mi}
  terminationGracePeriodSeconds: 0  # no guest OS to power off on an ACPI request
"""


def test_kubectl_cannot_delete_a_disk_a_running_vm_uses_until_it_stops(base: Path) -> None:
    served = start_daemon(
        base / "data", base / "daemon.log", options=("--proxy-port", str(free_port()))
    )
    try:
        kubectl(served, "apply", "-f", "-", stdin=IN_USE)
        kubectl(served, "wait", "vm", "linux-vm", "--for=jsonpath={.status.phase}=Running")
        kubectl(served, "wait", "vd", "linux-disk", "--for=condition=InUse")
        wide = kubectl(served, "get", "vd", "linux-disk", "-o", "wide").splitlines()
        columns = dict(zip(wide[0].split(), wide[1].split(), strict=False))
        assert (columns["PHASE"], columns["INUSE"], columns["VIRTUALMACHINE"]) == (
            "Ready",
            "True",
            "linux-vm",
        )
        claim = kubectl(
            served,
            "get",
            "vd",
            "linux-disk",
            "-o",
            "jsonpath={.status.target.persistentVolumeClaimName}",
        )
        files = list((base / "data" / "volumes").glob(f"*/default/{claim}.img"))
        assert len(files) == 1

        out = kubectl(served, "delete", "vd", "linux-disk", "--wait=false")
        assert 'virtualdisk.diskferry.io "linux-disk" deleted' in out
        kubectl(served, "wait", "vd", "linux-disk", "--for=jsonpath={.status.phase}=Terminating")
        finalizers = kubectl(
            served, "get", "vd", "linux-disk", "-o", "jsonpath={.metadata.finalizers}"
        )
        assert "diskferry.io/vd-protection" in finalizers
        events = wait_until(
            lambda: kubectl(
                served,
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=linux-disk,reason=InUse",
                "-o",
                "jsonpath={.items[*].message}",
            ),
            30,
        )
        assert "linux-vm" in events and "deletion waits" in events
        assert files[0].exists()
        vm = kubectl(served, "get", "vm", "linux-vm", "-o", "jsonpath={.status.phase}")
        assert vm == "Running"

        off = '{"spec":{"runPolicy":"AlwaysOff"}}'
        kubectl(served, "patch", "vm", "linux-vm", "--type=merge", "-p", off)
        kubectl(served, "wait", "vd", "linux-disk", "--for=delete", "--timeout=60s")
        assert not files[0].exists()
    finally:
        assert served.stop() == 0
