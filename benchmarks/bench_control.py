"""Control-plane benchmark: what an import and an incremental backup through the control plane
cost beyond the engine's own work.

Import: a VirtualDisk of 32 MiB of random bytes from nginx, its rate limited to 4 MiB/s so the
import takes 8 s, timed from its creation to Ready; the peer is `diskferry import` of the same
URL alone. What the control plane adds is counted too: the CPU seconds of the controllers'
process (the worker's own are not in them) over the import, the store's writes (how far its
resourceVersion moved), the watch's MODIFIED events of the disk, and how much the state file
(with its WAL) grew.

Backup: 1, 10 and 50 small VMs.

The controllers run in this process over a fresh data directory, as `diskferry serve` runs
them. Each VM is stopped, has CBT on, and one 16 MiB disk with 1 MiB of data; a first Backup
of all of them (full) is not timed. Then 64 KiB is written through each disk's CBT overlay,
and a Backup of all the VMs is timed from its creation to Completed, with
maxConcurrentDataMovers 1, so the VMs' uploads run one after another and the time per VM is
the Backup's over the number of VMs. The peer is the engine alone on the same disk: the same
incremental (64 KiB written, then `diskferry backup` of that disk's overlay into the same
repository), the whole process timed, and the seconds the engine reports for the disk itself.
Per VM, the fixed cost of the control plane is its time less the engine's own disk time
(scheduling, reconciling, starting and following a worker that opens the repository and the
disk, status and Events), and, less the engine alone as a process, what the control plane
adds to one `diskferry backup`. The CPU seconds per VM (the controllers' and every worker's,
user and system, against the engine alone's) say the same with less of the machine's load in
them. Nothing is asserted but that every upload was incremental.

`python -m benchmarks.bench_control [--vms 1,10,50] [--rounds 1]` (`--vms ''` for the import
alone)
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_import import DISKFERRY
from benchmarks.load import LoadWatch
from benchmarks.measure import Comparison, Run, run_process
from benchmarks.nginx import nginx
from benchmarks.options import as_installed
from benchmarks.run import print_table
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.controllers import Controllers
from diskferry.control.errors import NotFoundError
from diskferry.control.resources.model import API_VERSION
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS

PASSWORD = "bench-control-password"
DISK_SIZE = "16Mi"
DATA = 1 << 20
WRITE = "write -P 0x5a 2M 64k"
COUNTS = (1, 10, 50)
TIMEOUT = 3600.0
IMPORT_SIZE = 32 << 20
IMPORT_RATE = 4 << 20  # bytes a second, nginx's limit_rate: 8 s for IMPORT_SIZE


class Plane:
    """The store and the controllers over one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.objects = ObjectService(data_dir / "state.db", REGISTRY)
        self.controllers = Controllers(data_dir, self.objects, workers=2)
        self.controllers.start()

    def stop(self) -> None:
        """Stop the controllers and close the store."""
        self.controllers.stop()
        self.objects.close()

    def create(self, kind: str, name: str, spec: dict[str, Any], **meta: Any) -> None:
        """Create `kind` `name` (in default when namespaced) with `spec`."""
        info = REGISTRY.by_kind(kind)
        body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name, **meta}}
        self.objects.create(info, "default" if info.namespaced else None, {**body, "spec": spec})

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object in default, None when there is none."""
        try:
            return self.objects.get(REGISTRY.by_kind(kind), "default", name)
        except NotFoundError:
            return None

    def wait(self, kind: str, name: str, *phases: str) -> dict[str, Any]:
        """The object once its phase is one of `phases`."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            obj = self.get(kind, name) or {}
            if (obj.get("status") or {}).get("phase") in phases:
                return obj
            time.sleep(0.02)
        raise RuntimeError(f"{kind} {name} not {'/'.join(phases)} within {TIMEOUT:.0f} s")

    def claim(self, name: str) -> Path:
        """The file of the Ready VirtualDisk `name`."""
        status = self.wait("VirtualDisk", name, "Ready")["status"]
        claim = status["target"]["persistentVolumeClaimName"]
        return self.data_dir / "volumes" / status["storageClassName"] / "default" / f"{claim}.img"


def _cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    """User and system CPU seconds of this process (the controllers' threads) so far; of its
    children that ended (the workers) with RUSAGE_CHILDREN."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _cpu_with_workers() -> float:
    """CPU seconds of the controllers and of the workers that ended, so far."""
    return _cpu_seconds() + _cpu_seconds(resource.RUSAGE_CHILDREN)


def _state_bytes(data_dir: Path) -> int:
    """The size of the state file and its write-ahead log."""
    return sum(p.stat().st_size for p in data_dir.glob("state.db*"))


def _import_through(plane: Plane, url: str) -> tuple[float, float, int, int]:
    """Import `url` into a VirtualDisk and wait for Ready: seconds, CPU seconds of this
    process, store writes and the disk's MODIFIED watch events."""
    version = plane.objects.resource_version()
    watch = plane.objects.watch(VIRTUAL_DISKS, "default", resource_version=version)
    cpu, start = _cpu_seconds(), time.monotonic()
    plane.create("VirtualDisk", "imported", {"dataSource": {"type": "HTTP", "http": {"url": url}}})
    modified, phase = 0, None
    try:
        while phase not in ("Ready", "Failed"):
            if time.monotonic() - start > TIMEOUT:
                raise RuntimeError(f"the import is still {phase} after {TIMEOUT:.0f} s")
            for event in watch.next(1.0):
                modified += 1 if event.type == "MODIFIED" else 0
                phase = (event.object.get("status") or {}).get("phase")
    finally:
        watch.close()
    seconds, cpu = time.monotonic() - start, _cpu_seconds() - cpu
    if phase != "Ready":
        raise RuntimeError(f"the import failed: {plane.get('VirtualDisk', 'imported')}")
    writes = int(plane.objects.resource_version()) - int(version)
    return seconds, cpu, writes, modified


def measure_import(workdir: Path, rounds: int) -> tuple[Comparison, str]:
    """The import row: through the control plane against `diskferry import` alone."""
    cmp = Comparison(
        f"import {IMPORT_SIZE >> 20} MiB over HTTP at {IMPORT_RATE >> 20} MiB/s via control plane "
        "vs `diskferry import`"
    )
    root = (workdir / "control-import").resolve()
    shutil.rmtree(root, ignore_errors=True)
    (root / "www").mkdir(parents=True)
    (root / "www" / "disk.raw").write_bytes(os.urandom(IMPORT_SIZE))
    cpus, writes, events, growth = [], [], [], []
    with nginx(root / "www", locations=f"limit_rate {IMPORT_RATE};") as base:
        url = f"{base}/disk.raw"
        for r in range(rounds):
            data_dir = root / f"data-{r}"
            plane = Plane(data_dir)
            try:
                before = _state_bytes(data_dir)
                seconds, cpu, written, modified = _import_through(plane, url)
                growth.append(_state_bytes(data_dir) - before)
            finally:
                plane.stop()
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            cmp.ours.append(Run(seconds, rss))
            cpus.append(cpu)
            writes.append(written)
            events.append(modified)
            out = root / f"alone-{r}.raw"
            cmp.peer.append(run_process([*DISKFERRY, "import", url, str(out), "--no-progress"]))
            out.unlink()
    shutil.rmtree(root, ignore_errors=True)
    note = (
        f"the controllers' process: {statistics.median(cpus):.2f} CPU s per import, "
        f"{statistics.median(writes):.0f} store writes, {statistics.median(events):.0f} "
        f"MODIFIED events of the disk, state file grew {statistics.median(growth) / 2**20:.2f} "
        "MiB; RSS: the controllers' process"
    )
    return cmp, note


def _setup(plane: Plane, repo: Path, count: int) -> list[Path]:
    """The location, the limits, and `count` stopped CBT VMs each on one disk; the disks."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "repo-pass"}}
    secret["data"] = {"password": base64.b64encode(PASSWORD.encode()).decode()}
    plane.objects.create(REGISTRY.by_kind("Secret"), "default", secret)
    location = {
        "provider": "filesystem",
        "objectStorage": {"bucket": str(repo)},
        "encryptionSecretRef": {"name": "repo-pass", "key": "password"},
    }
    plane.create("BackupStorageLocation", "repo", location)
    plane.create("DataMoverConfig", "default", {"maxConcurrentDataMovers": 1})
    disks = []
    for i in range(count):
        plane.create("VirtualDisk", f"vd-{i}", {"persistentVolumeClaim": {"size": DISK_SIZE}})
    for i in range(count):
        claim = plane.claim(f"vd-{i}")
        with claim.open("r+b") as f:
            f.seek(DATA)
            f.write(os.urandom(DATA))
        disks.append(claim)
        spec = {
            "runPolicy": "AlwaysOff",
            "blockDeviceRefs": [{"kind": "VirtualDisk", "name": f"vd-{i}"}],
            "memory": {"size": "64Mi"},
        }
        labels = {"app": "bench", "diskferry.io/changed-block-tracking": "true"}
        plane.create("VirtualMachine", f"vm-{i}", spec, labels=labels)
    for claim in disks:
        _wait_for(Path(f"{claim}.cbt.qcow2").exists)
    plane.wait("BackupStorageLocation", "repo", "Available")
    return disks


def _wait_for(what: Any) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not what():
        if time.monotonic() > deadline:
            raise RuntimeError(f"still not true after {TIMEOUT:.0f} s: {what}")
        time.sleep(0.05)


def _write(claim: Path) -> None:
    """64 KiB written through the disk's CBT overlay, so its bitmap sees them."""
    overlay = f"{claim}.cbt.qcow2"
    command = ["qemu-io", "-f", "qcow2", "-c", WRITE, overlay]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def _backup(plane: Plane, name: str) -> tuple[float, float]:
    """Seconds from creating a Backup of every VM to its Completed, and the CPU seconds the
    controllers and the workers spent meanwhile."""
    spec = {
        "includedNamespaces": ["default"],
        "labelSelector": {"matchLabels": {"app": "bench"}},
        "storageLocation": "repo",
    }
    cpu, start = _cpu_with_workers(), time.monotonic()
    plane.create("Backup", name, spec)
    done = plane.wait("Backup", name, "Completed", "PartiallyFailed", "Failed")
    seconds, cpu = time.monotonic() - start, _cpu_with_workers() - cpu
    if done["status"]["phase"] != "Completed":
        raise RuntimeError(f"Backup {name} {done['status']['phase']}: {done['status']}")
    return seconds, cpu


def _types(plane: Plane, backup: str, count: int) -> set[str]:
    """The backup types of the uploads of `backup`."""
    types = set()
    for i in range(count):
        for disk in plane.get("DataUpload", f"{backup}-vm-{i}")["status"]["disks"]:
            types.add(disk["type"])
    return types


def _engine_alone(root: Path, repo: Path, claim: Path) -> tuple[Run, float]:
    """The same incremental by the engine alone: 64 KiB written, `diskferry backup` timed;
    the run, and the seconds the engine says it spent on the disk itself."""
    _write(claim)
    env = {**os.environ, "DISKFERRY_PASSWORD": PASSWORD}
    cmd = [*DISKFERRY, "backup", "--repo", str(repo), "--vm", "default.vm-0", "--no-progress"]
    cmd += ["--disk", f"vd-0={claim}.cbt.qcow2", "--json"]
    out = root / "engine.json"
    with open(out, "w") as f, open(root / "engine.log", "a") as log:
        run = run_process(cmd, env=env, stdout=f, stderr=log)
    result = json.loads(out.read_text().strip().splitlines()[-1])
    if result["disks"][0]["type"] != "incremental":
        raise RuntimeError(f"the engine alone did not back up incrementally: {result}")
    return run, result["disks"][0]["seconds"]


def measure(workdir: Path, count: int, rounds: int) -> tuple[Comparison, str]:
    """The row of `count` VMs: per VM through the control plane, against the engine alone."""
    cmp = Comparison(f"incremental via control plane, {count} VMs (per VM)")
    totals: list[float] = []
    on_disk: list[float] = []
    for r in range(rounds):
        root = (workdir / f"control-{count}").resolve()
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        os.environ["DISKFERRY_CACHE_DIR"] = str(root / "cache")
        plane = Plane(root / "data")
        try:
            disks = _setup(plane, root / "repo", count)
            _backup(plane, "full")
            for claim in disks:
                _write(claim)
            seconds, cpu = _backup(plane, "incremental")
            if _types(plane, "incremental", count) != {"incremental"}:
                raise RuntimeError("the control plane's second Backup was not incremental")
        finally:
            plane.stop()
        totals.append(seconds)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        cmp.ours.append(Run(seconds / count, rss, cpu / count))
        for _ in range(3 if r == 0 else 1):
            alone, seconds = _engine_alone(root, root / "repo", disks[0])
            cmp.peer.append(alone)
            on_disk.append(seconds)
        shutil.rmtree(root, ignore_errors=True)
    disk_time = statistics.median(on_disk)
    cpu_ours = statistics.median(r.cpu_seconds for r in cmp.ours)
    cpu_peer = statistics.median(r.cpu_seconds for r in cmp.peer)
    note = (
        f"CPU per VM {cpu_ours:.2f} s (the controllers and the workers), the engine alone "
        f"{cpu_peer:.2f} s; "
        f"fixed cost per VM {cmp.ours_median - disk_time:.2f} s over the engine's own disk time "
        f"({disk_time:.2f} s), {cmp.ours_median - cmp.peer_median:.2f} s over the engine alone "
        f"as a process (`diskferry backup` on the same disk, the peer); Backup created to "
        f"Completed in {statistics.median(totals):.2f} s, maxConcurrentDataMovers 1; "
        "RSS: the controllers' process"
    )
    return cmp, note


def run(
    workdir: Path, rounds: int, counts: tuple[int, ...] = COUNTS
) -> list[tuple[Comparison, str]]:
    """The import's row, then one per count of VMs."""
    return [measure_import(workdir, rounds), *(measure(workdir, n, rounds) for n in counts)]


def main() -> None:
    """Run the benchmark for the counts asked and print its table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, default=Path("benchmarks/work"))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--vms", default=",".join(map(str, COUNTS)))
    args = parser.parse_args()
    as_installed()
    counts = tuple(int(n) for n in args.vms.split(",") if n)
    with LoadWatch() as load:
        rows = run(args.workdir, args.rounds, counts)
    print_table("control", rows, load)


if __name__ == "__main__":
    main()
