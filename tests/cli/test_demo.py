"""`diskferry demo` end to end: the daemon's disks, image and export, the download through the
proxy, a VM on the disk backed up in full and then incrementally around writes made through
its QMP socket, both points restored into namespaces of their own and compared, each step
verified, and nothing left running."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from diskferry.cli import demo_cmd, demo_steps
from diskferry.cli.demo_backup import PASSWORD, stop_jobs, stop_machines
from diskferry.control.host.embedded.machines import QemuMachines
from diskferry.control.host.machines import MachineSpec
from diskferry.control.runtime.runner.local import LocalRunner
from diskferry.qemu import img
from diskferry.worker import WorkerJob


def _running_under(directory: Path) -> list[tuple[int, str]]:
    """The processes working in `directory` or naming it on their command line (the daemon,
    its workers, the VMs' QEMU), with their command lines."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").replace("\0", " ")
        except OSError:
            continue
        if cwd.startswith(str(directory)) or str(directory) in argv:
            found.append((int(pid), argv))
    return found


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory short enough for the Unix sockets of the VMs under it; whatever a demo
    stopped halfway left running under it is killed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="dfdemo", dir="/tmp"))
    yield path
    for pid, _ in _running_under(path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def _restored_disk(work: Path, namespace: str) -> Path:
    [disk] = (work / "data/volumes/local" / namespace).glob("vd-demo-disk-*.img")
    return disk


@pytest.mark.long
@pytest.mark.timeout(1500)
def test_demo_runs_every_step_and_verifies_it(short_dir: Path) -> None:
    work = short_dir / "d"
    proc = subprocess.run(
        [sys.executable, "-m", "diskferry.cli.main", "demo", "--dir", str(work)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    for _, name in demo_cmd._OBJECTS:
        assert any(line.endswith(f"/{name} condition met") for line in out), name
    for kind, name in (("backup", "demo-1"), ("backup", "demo-2"), ("restore", "demo-2")):
        assert f"{kind}.diskferry.io/{name} condition met" in out
    assert any(line.split()[:2] == ["demo-2-demo-vm", "Completed"] for line in out)  # get -w
    lines = proc.stderr.splitlines()
    assert any("downloaded through the proxy; qemu-img compare" in ln for ln in lines)
    assert any("changed-block tracking Enabled" in ln for ln in lines)
    assert f"diskferry: backup repository {work / 'backups'}, password {PASSWORD} " in "\n".join(
        lines
    )
    assert any("backup 1: full" in ln for ln in lines)
    assert any(
        "backup 2: incremental" in ln and "read 1048576 bytes" in ln and "DataUpload demo-2" in ln
        for ln in lines
    )
    for point in (1, 2):
        said = f"restore demo-{point} into namespace restored-{point}: its demo-disk is identical"
        assert sum(said in ln for ln in lines) == 1, said
    assert any(f"kubectl --kubeconfig {work / 'data/kubeconfig'}" in ln for ln in lines)
    downloaded = work / "downloaded.img"
    assert downloaded.stat().st_size == 512 << 20  # the claim's size
    assert downloaded.stat().st_blocks * 512 < downloaded.stat().st_size // 2
    first, second = _restored_disk(work, "restored-1"), _restored_disk(work, "restored-2")
    assert img.compare(str(first), str(work / "served/sample.raw"), "raw", "raw")
    with second.open("rb") as f:
        f.seek(3 << 20)
        assert f.read(65536) == b"\x40" * 65536  # the first write made through QMP
    assert not img.compare(str(first), str(second), "raw", "raw")
    assert (work / "backups/config").exists()
    assert len(list((work / "data/volumes").rglob("*.img"))) == 6  # 3 disks, an image, 2 restored
    assert _running_under(work) == []


def test_a_vm_left_running_by_a_failed_demo_is_stopped(short_dir: Path) -> None:
    machines = QemuMachines(short_dir)
    machines.start(
        "restored-1", "demo-vm", MachineSpec(cores=1, memory_bytes=16 << 20, disks=[]), {}
    )
    assert machines.running("restored-1", "demo-vm")
    stop_machines(short_dir)
    assert not machines.running("restored-1", "demo-vm")
    assert _running_under(short_dir) == []


def test_a_directory_too_deep_for_the_vms_sockets_is_refused_before_anything_is_made(
    tmp_path: Path,
) -> None:
    work = tmp_path / ("d" * 90)
    proc = subprocess.run(
        [sys.executable, "-m", "diskferry.cli.main", "demo", "--dir", str(work)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1
    assert "longer than 107 bytes" in proc.stderr
    assert not work.exists()


def test_a_demo_command_that_hangs_is_a_demo_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_steps, "STEP_SECONDS", 1)
    with pytest.raises(demo_steps.DemoError, match="a sleeper did not finish within 1 s"):
        demo_steps.step([sys.executable, "-c", "import time; time.sleep(60)"], "a sleeper")


def test_a_daemon_that_cannot_start_is_a_demo_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with (
        pytest.raises(demo_steps.DemoError, match="diskferry serve did not start"),
        demo_cmd._daemon(blocker / "data", tmp_path / "serve.log"),
    ):
        pass


# `get -w` writes half a line and waits for `wait` to print before it ends the line
_INTERLEAVING = """
import os, sys, time
here = os.path.dirname(sys.argv[0])
half, said, whole = (os.path.join(here, name) for name in ("half", "said", "whole"))
def until(path):
    while not os.path.exists(path):
        time.sleep(0.01)
if sys.argv[1] == "get":
    sys.stdout.write("vd-a   Provisioning"); sys.stdout.flush()
    open(half, "w").close()
    until(said)
    sys.stdout.write("   50%\\n"); sys.stdout.flush()
    open(whole, "w").close()
    time.sleep(60)
else:
    until(half)
    print("virtualdisk.diskferry.io/vd-a condition met", flush=True)
    open(said, "w").close()
    # the wait ends only once the watch has ended its line, so that stopping the watch cuts none
    until(whole)
"""


def test_a_watch_s_line_and_a_wait_s_line_never_share_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "fake_diskferry.py"
    script.write_text(_INTERLEAVING)
    monkeypatch.setattr(demo_steps, "DISKFERRY", [sys.executable, str(script)])
    demo_steps.watched(tmp_path / "kubeconfig", "vd", [("vd", "vd-a", "Ready", None)])
    lines = capfd.readouterr().out.splitlines()
    assert sorted(lines) == [
        "vd-a   Provisioning   50%",
        "virtualdisk.diskferry.io/vd-a condition met",
    ]


def test_a_wait_that_says_nothing_is_a_demo_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "silent.py"
    script.write_text("import sys, time\nif sys.argv[1] == 'get': time.sleep(60)\n")
    monkeypatch.setattr(demo_steps, "DISKFERRY", [sys.executable, str(script)])
    with pytest.raises(demo_steps.DemoError, match="wait vd vd-a did not say its condition met"):
        demo_steps.watched(tmp_path / "kubeconfig", "vd", [("vd", "vd-a", "Ready", None)])


class LingeringJob(WorkerJob):
    """A job of the module `lingering`, which the test puts on PYTHONPATH."""

    WORKER = "lingering"


def test_the_workers_a_daemon_left_are_ended_with_the_demo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lingering.py").write_text("import time\ntime.sleep(120)\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    data_dir = tmp_path / "data"
    runner = LocalRunner(data_dir)
    for job_id in ("export-proxy", "vmexport-left"):
        runner.start(job_id, LingeringJob())
    assert all(runner.state(j).running for j in runner.job_ids())
    stop_jobs(data_dir)
    deadline = time.monotonic() + 30
    while any(runner.state(j).running for j in runner.job_ids()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(runner.state(j).running for j in runner.job_ids())
    assert runner.job_ids() == ["export-proxy", "vmexport-left"]
