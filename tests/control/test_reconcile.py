"""The reconcilers end to end, over the real store, the manager and real import workers:
VirtualDisks from HTTP, blank, from a VirtualImage and from a snapshot; failures shown with
reason, message and an Event; and deletes that leave nothing behind."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from reconcile_support import Daemon, ready_condition
from reconcile_support import http_source as _http

from diskferry.control.host.embedded.volumes import block_unavailable
from diskferry.control.resources.model import API_VERSION
from diskferry.control.resources.storageclass import STORAGE_CLASSES
from diskferry.control.resources.vdsnapshot import VIRTUAL_DISK_SNAPSHOTS
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS
from diskferry.control.resources.virtualimage import VIRTUAL_IMAGES
from diskferry.disk.prime import recorded_job

MiB = 1 << 20


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "data")
    yield running
    running.stop()
    running.detach_loops()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _workers_of(data_dir: Path, module: str = "") -> list[str]:
    """Processes working in a job directory of `data_dir` (running `module`, when given)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cwd = Path(f"/proc/{pid}/cwd").resolve()
            except OSError:
                continue
            if str(data_dir / "jobs") in str(cwd) and module.encode() in _cmdline(pid):
                found.append(pid)
    return found


def test_a_disk_from_http_is_ready_with_its_bytes(daemon, nginx, images) -> None:
    image = images.get("qcow2")
    url = nginx.publish(image, "ready.qcow2")
    spec = {
        "persistentVolumeClaim": {"size": "64Mi"},
        "dataSource": _http(url, checksum={"sha256": _sha256(image)}),
    }
    daemon.apply("VirtualDisk", "vd1", spec)
    disk = daemon.wait_phase("VirtualDisk", "vd1", "Ready", "Failed")
    status = disk["status"]
    assert status["phase"] == "Ready", status
    assert (status["capacity"], status["progress"], status["storageClassName"]) == (
        "64Mi",
        "100%",
        "local",
    )
    assert status["target"]["persistentVolumeClaimName"].startswith("vd-vd1-")
    assert status["stats"]["creationDuration"]["totalProvisioning"].endswith("s")
    assert status["observedGeneration"] == 1
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    claim = daemon.claim(disk)
    assert claim.stat().st_size == 64 * MiB  # grown to the claim's size
    assert images.same(claim, images.reference)
    # an Event follows the status it tells of
    wanted = {"Pending", "Provisioning", "Ready"}
    wait_until(lambda: wanted <= {e["reason"] for e in daemon.events("vd1")})
    assert disk["metadata"]["finalizers"] == ["diskferry.io/cleanup"]
    wait_until(lambda: sorted(os.listdir(daemon.data_dir / "jobs")) == ["failed", "logs"])
    kept = os.listdir(daemon.data_dir / "jobs" / "logs")
    assert len(kept) == 1 and "import done" in (daemon.data_dir / "jobs/logs" / kept[0]).read_text()
    assert os.listdir(daemon.data_dir / "jobs" / "failed") == []


def test_progress_and_speed_are_copied_into_status(daemon, faulty, tmp_path) -> None:
    source = tmp_path / "slow.raw"
    source.write_bytes(os.urandom(8 * MiB))
    url = faulty.add("slow.raw", source, piece=128 * 1024, trickle=0.05)
    secret_url = url.replace("http://", "http://user:hunter2@") + "?token=hunter2"
    daemon.apply("VirtualDisk", "slow", {"dataSource": _http(secret_url)})
    seen = wait_until(
        lambda: (
            (o := daemon.get("VirtualDisk", "slow"))
            and o["status"].get("progress") not in (None, "0%", "100%")
            and o["status"]
        )
    )
    assert seen["phase"] == "Provisioning"
    assert ready_condition(seen)["message"] == f"importing {url.split('?')[0]}"
    assert seen["progress"].endswith("%") and 0 < float(seen["progress"][:-1]) < 100
    speed = seen["downloadSpeed"]
    assert set(speed) == {"avg", "avgBytes", "current", "currentBytes"}
    assert int(speed["avgBytes"]) > 0 and speed["avg"].endswith("/s")
    disk = daemon.wait_phase("VirtualDisk", "slow", "Ready")
    assert daemon.claim(disk).read_bytes() == source.read_bytes()
    assert disk["status"]["capacity"] == "8Mi"
    said = str(disk["status"]) + str(daemon.events("slow"))
    assert "hunter2" not in said


@pytest.mark.parametrize(
    ("case", "reason", "words"),
    [
        ("missing", "HttpError", "404"),
        ("checksum", "ChecksumMismatch", "sha256"),
        ("backing", "ImageRefused", "backing file"),
        ("too-small", "SizeTooSmall", "16Mi (16777216 bytes)"),
    ],
)
def test_a_failed_import_is_failed_with_reason_message_and_event(
    daemon, nginx, images, tmp_path, case, reason, words, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="diskferry.control")
    spec: dict[str, Any] = {}
    if case == "missing":
        spec["dataSource"] = _http(f"{nginx.url}/no-such.img")
    elif case == "checksum":
        url = nginx.publish(images.reference, "sum.raw")
        spec["dataSource"] = _http(url, checksum={"sha256": "0" * 64})
    elif case == "backing":
        overlay = tmp_path / "overlay.qcow2"
        subprocess.run(
            [
                "qemu-img",
                "create",
                "-q",
                "-f",
                "qcow2",
                "-F",
                "raw",
                "-b",
                str(images.reference),
                str(overlay),
            ],
            check=True,
        )
        spec["dataSource"] = _http(nginx.publish(overlay, "overlay.qcow2"))
    else:
        spec["dataSource"] = _http(nginx.publish(images.reference, "big.raw"))
        spec["persistentVolumeClaim"] = {"size": "16Mi"}
    daemon.apply("VirtualDisk", case, spec)
    disk = daemon.wait_phase("VirtualDisk", case, "Failed", "Ready")
    status = disk["status"]
    assert status["phase"] == "Failed"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == reason, ready
    assert words in ready["message"]
    warning = wait_until(lambda: [e for e in daemon.events(case) if e["type"] == "Warning"])
    assert [(e["reason"], e["message"]) for e in warning] == [(reason, ready["message"])]
    if case == "too-small":
        assert str(images.disk_size) in ready["message"]
    # the failed worker's files are kept until the disk is deleted, the claim holds nothing
    job = f"vd-{disk['metadata']['uid']}"
    kept = daemon.data_dir / "jobs" / "failed" / job
    wait_until(kept.exists)
    # the worker's log went into the daemon's, tagged with the disk
    tagged = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith(f"VirtualDisk default/{case}: ")
    ]
    assert any("ERROR" in line for line in tagged), tagged
    assert not daemon.claim(disk).exists()
    daemon.objects.delete(VIRTUAL_DISKS, "default", case)
    wait_until(lambda: daemon.get("VirtualDisk", case) is None)
    assert not kept.exists()
    assert not daemon.claim(disk).parent.exists()


def _worker_said(caplog: pytest.LogCaptureFixture, tag: str, words: str) -> bool:
    """Whether the daemon's log has a line of the worker of `tag` with `words` in it."""
    return any(
        r.getMessage().startswith(f"{tag}: ") and words in r.getMessage() for r in caplog.records
    )


def test_a_blank_disk_is_made_by_a_worker(daemon, caplog) -> None:
    caplog.set_level(logging.INFO, logger="diskferry.control")
    daemon.apply("VirtualDisk", "blank", {"persistentVolumeClaim": {"size": "20Mi"}})
    disk = daemon.wait_phase("VirtualDisk", "blank", "Ready", "Failed")
    assert disk["status"]["phase"] == "Ready" and disk["status"]["capacity"] == "20Mi"
    claim = daemon.claim(disk)
    assert claim.stat().st_size == 20 * MiB and claim.stat().st_blocks == 0
    assert os.listdir(claim.parent) == [claim.name]
    assert recorded_job(str(claim)) == f"vd-blank-{disk['metadata']['uid']}"
    assert _worker_said(caplog, "VirtualDisk default/blank", "blank done")


def test_a_snapshot_and_a_disk_from_it_where_extents_are_shared_are_instant_copies(
    reflink_dir: Path, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="diskferry.control")
    daemon = Daemon(reflink_dir / "data")
    try:
        daemon.apply("VirtualDisk", "source", {"persistentVolumeClaim": {"size": "8Mi"}})
        source = daemon.claim(daemon.wait_phase("VirtualDisk", "source", "Ready"))
        data = os.urandom(8 * MiB)
        source.write_bytes(data)
        daemon.apply("VirtualDiskSnapshot", "snap", {"virtualDiskName": "source"})
        snap = daemon.wait_phase("VirtualDiskSnapshot", "snap", "Ready", "Failed")
        assert snap["status"]["phase"] == "Ready", snap["status"]
        copy = source.parent / f"{snap['status']['volumeSnapshotName']}.img"
        assert recorded_job(str(copy)) == f"vds-reflink-{snap['metadata']['uid']}"
        ref = {"type": "ObjectRef", "objectRef": {"kind": "VirtualDiskSnapshot", "name": "snap"}}
        spec = {"persistentVolumeClaim": {"size": "12Mi"}, "dataSource": ref}
        daemon.apply("VirtualDisk", "copy", spec)
        disk = daemon.wait_phase("VirtualDisk", "copy", "Ready", "Failed")
        assert disk["status"]["phase"] == "Ready", disk["status"]
        assert daemon.claim(disk).read_bytes() == data + bytes(4 * MiB)
        assert recorded_job(str(daemon.claim(disk))) == f"vd-reflink-{disk['metadata']['uid']}"
        assert _worker_said(caplog, "VirtualDisk default/copy", "reflink done")
        assert _worker_said(caplog, "VirtualDiskSnapshot default/snap", "reflink done")
    finally:
        daemon.stop()


def test_a_disk_from_an_image_and_a_disk_from_its_snapshot(daemon, nginx, images) -> None:
    url = nginx.publish(images.get("vmdk"), "image.vmdk")
    daemon.apply(
        "VirtualImage", "img", {"storage": "PersistentVolumeClaim", "dataSource": _http(url)}
    )
    # the disk waits for its image
    daemon.apply(
        "VirtualDisk",
        "from-image",
        {
            "persistentVolumeClaim": {"size": "40Mi"},
            "dataSource": {
                "type": "ObjectRef",
                "objectRef": {"kind": "VirtualImage", "name": "img"},
            },
        },
    )
    image = daemon.wait_phase("VirtualImage", "img", "Ready", "Failed")
    status = image["status"]
    assert status["phase"] == "Ready", status
    assert status["size"]["unpackedBytes"] == str(images.disk_size)
    assert status["size"]["unpacked"] == "32Mi"
    assert int(status["size"]["storedBytes"]) < images.disk_size  # sparse
    assert (status["format"], status["cdrom"]) == ("vmdk", False)
    assert images.same(daemon.claim(image), images.reference)
    disk = daemon.wait_phase("VirtualDisk", "from-image", "Ready", "Failed")
    assert disk["status"]["phase"] == "Ready", disk["status"]
    assert disk["status"]["sourceUID"] == image["metadata"]["uid"]
    took = disk["status"]["stats"]["creationDuration"]
    assert took["waitingForDependencies"].endswith("s") and took["totalProvisioning"].endswith("s")
    assert disk["status"]["capacity"] == "40Mi"
    assert images.same(daemon.claim(disk), images.reference)

    daemon.objects.create(
        VIRTUAL_DISK_SNAPSHOTS,
        "default",
        {
            "apiVersion": API_VERSION,
            "kind": "VirtualDiskSnapshot",
            "metadata": {"name": "snap"},
            "spec": {"virtualDiskName": "from-image"},
        },
    )
    snap = daemon.wait_phase("VirtualDiskSnapshot", "snap", "Ready", "Failed")
    assert snap["status"]["phase"] == "Ready", snap["status"]
    assert snap["status"]["consistent"] is True
    with open(daemon.claim(disk), "r+b") as f:  # the disk changes after its snapshot
        f.write(b"changed after the snapshot")
    daemon.apply(
        "VirtualDisk",
        "from-snap",
        {
            "dataSource": {
                "type": "ObjectRef",
                "objectRef": {"kind": "VirtualDiskSnapshot", "name": "snap"},
            }
        },
    )
    restored = daemon.wait_phase("VirtualDisk", "from-snap", "Ready", "Failed")
    assert restored["status"]["phase"] == "Ready", restored["status"]
    assert restored["status"]["capacity"] == "40Mi"
    assert images.same(daemon.claim(restored), images.reference)

    for kind, info, name in (
        ("VirtualDisk", VIRTUAL_DISKS, "from-snap"),
        ("VirtualDiskSnapshot", VIRTUAL_DISK_SNAPSHOTS, "snap"),
        ("VirtualDisk", VIRTUAL_DISKS, "from-image"),
        ("VirtualImage", VIRTUAL_IMAGES, "img"),
    ):
        daemon.objects.delete(info, "default", name)
        wait_until(lambda kind=kind, name=name: daemon.get(kind, name) is None)
    volumes = daemon.data_dir / "volumes" / "local"
    assert list(volumes.rglob("*")) == []
    assert sorted(os.listdir(daemon.data_dir / "jobs")) == ["failed", "logs"]
    assert os.listdir(daemon.data_dir / "jobs" / "logs") == []


def test_deleting_a_disk_mid_import_stops_its_worker_and_leaves_nothing(
    daemon, faulty, tmp_path
) -> None:
    source = tmp_path / "slow.raw"
    source.write_bytes(os.urandom(8 * MiB))
    url = faulty.add("slow.raw", source, piece=64 * 1024, trickle=0.1)
    daemon.apply("VirtualDisk", "gone", {"dataSource": _http(url)})
    daemon.wait_phase("VirtualDisk", "gone", "Provisioning")
    wait_until(lambda: _workers_of(daemon.data_dir))
    daemon.objects.delete(VIRTUAL_DISKS, "default", "gone")
    wait_until(lambda: daemon.get("VirtualDisk", "gone") is None)
    assert _workers_of(daemon.data_dir) == []
    assert sorted(os.listdir(daemon.data_dir / "jobs")) == ["failed", "logs"]
    assert os.listdir(daemon.data_dir / "jobs" / "failed") == []
    assert os.listdir(daemon.data_dir / "jobs" / "logs") == []
    assert list((daemon.data_dir / "volumes").rglob("*.img*")) == []
    assert "Terminating" in {e["reason"] for e in daemon.events("gone")}


def test_a_disk_in_a_block_class(daemon, nginx, images) -> None:
    why = block_unavailable()
    if why:
        pytest.skip(why)
    url = nginx.publish(images.get("qcow2"), "block.qcow2")
    spec = {
        "persistentVolumeClaim": {"size": "48Mi", "storageClassName": "local-block"},
        "dataSource": _http(url),
    }
    daemon.apply("VirtualDisk", "on-block", spec)
    disk = daemon.wait_phase("VirtualDisk", "on-block", "Ready", "Failed")
    assert disk["status"]["phase"] == "Ready", disk["status"]
    assert disk["status"]["capacity"] == "48Mi"
    backing = daemon.claim(disk)
    assert images.same(backing, images.reference)
    daemon.objects.delete(VIRTUAL_DISKS, "default", "on-block")
    wait_until(lambda: daemon.get("VirtualDisk", "on-block") is None)
    assert not backing.exists()
    out = subprocess.run(["losetup", "--list", "--noheadings"], capture_output=True, text=True)
    assert str(backing) not in out.stdout


def test_a_block_claim_without_a_size_is_refused(daemon, nginx, images) -> None:
    why = block_unavailable()
    if why:
        pytest.skip(why)
    spec = {
        "persistentVolumeClaim": {"storageClassName": "local-block"},
        "dataSource": _http(nginx.publish(images.reference, "nosize.raw")),
    }
    daemon.apply("VirtualDisk", "no-size", spec)
    disk = daemon.wait_phase("VirtualDisk", "no-size", "Failed", "Ready")
    ready = next(c for c in disk["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "SizeRequired" and "local-block" in ready["message"]


def test_a_missing_storage_class_keeps_the_disk_pending(daemon) -> None:
    spec = {"persistentVolumeClaim": {"size": "1Mi", "storageClassName": "nowhere"}}
    daemon.apply("VirtualDisk", "lost", spec)
    disk = wait_until(
        lambda: (
            (o := daemon.get("VirtualDisk", "lost"))
            and any(
                c["reason"] == "StorageClassNotFound" for c in o["status"].get("conditions", [])
            )
            and o
        )
    )
    assert disk["status"]["phase"] == "Pending"
    assert "nowhere" in ready_condition(disk["status"])["message"]


def test_a_snapshot_of_a_block_disk_and_a_file_disk_from_it(daemon, nginx, images) -> None:
    why = block_unavailable()
    if why:
        pytest.skip(why)
    url = nginx.publish(images.get("qcow2"), "snap-block.qcow2")
    spec = {
        "persistentVolumeClaim": {"size": "36Mi", "storageClassName": "local-block"},
        "dataSource": _http(url),
    }
    daemon.apply("VirtualDisk", "blk", spec)
    assert daemon.wait_phase("VirtualDisk", "blk", "Ready", "Failed")["status"]["phase"] == "Ready"
    daemon.objects.create(
        VIRTUAL_DISK_SNAPSHOTS,
        "default",
        {
            "apiVersion": API_VERSION,
            "kind": "VirtualDiskSnapshot",
            "metadata": {"name": "blk-snap"},
            "spec": {"virtualDiskName": "blk"},
        },
    )
    snap = daemon.wait_phase("VirtualDiskSnapshot", "blk-snap", "Ready", "Failed")
    assert snap["status"]["phase"] == "Ready", snap["status"]
    ref = {"kind": "VirtualDiskSnapshot", "name": "blk-snap"}
    daemon.apply("VirtualDisk", "blk-copy", {"dataSource": {"type": "ObjectRef", "objectRef": ref}})
    copy = daemon.wait_phase("VirtualDisk", "blk-copy", "Ready", "Failed")
    assert copy["status"]["phase"] == "Ready", copy["status"]
    assert (copy["status"]["storageClassName"], copy["status"]["capacity"]) == ("local", "36Mi")
    assert images.same(daemon.claim(copy), images.reference)
    for kind, info, name in (
        ("VirtualDisk", VIRTUAL_DISKS, "blk-copy"),
        ("VirtualDiskSnapshot", VIRTUAL_DISK_SNAPSHOTS, "blk-snap"),
        ("VirtualDisk", VIRTUAL_DISKS, "blk"),
    ):
        daemon.objects.delete(info, "default", name)
        wait_until(lambda kind=kind, name=name: daemon.get(kind, name) is None)
    assert list((daemon.data_dir / "volumes").rglob("*.img*")) == []
    out = subprocess.run(["losetup", "--list", "--noheadings"], capture_output=True, text=True)
    assert str(daemon.data_dir) not in out.stdout


def test_a_private_ca_bundle_and_the_worker_log(daemon, faulty_tls, tls, images) -> None:
    url = faulty_tls.add("tls.raw", images.reference)
    bundle = base64.b64encode(tls.ca.read_bytes()).decode()
    daemon.apply("VirtualDisk", "tls", {"dataSource": _http(url, caBundle=bundle)})
    disk = daemon.wait_phase("VirtualDisk", "tls", "Ready", "Failed")
    assert disk["status"]["phase"] == "Ready", disk["status"]
    assert images.same(daemon.claim(disk), images.reference)
    daemon.apply("VirtualDisk", "untrusted", {"dataSource": _http(url)})
    failed = daemon.wait_phase("VirtualDisk", "untrusted", "Failed", "Ready")
    assert ready_condition(failed["status"])["reason"] == "TlsVerificationFailed"
    logged = daemon.controllers.log_tail("VirtualDisk", "default", "untrusted")
    assert any("ERROR" in line for line in logged), logged
    assert daemon.controllers.log_tail("VirtualDisk", "default", "nothing") == []


def test_a_block_claim_smaller_than_the_image_is_refused(daemon, nginx, images) -> None:
    why = block_unavailable()
    if why:
        pytest.skip(why)
    spec = {
        "persistentVolumeClaim": {"size": "8Mi", "storageClassName": "local-block"},
        "dataSource": _http(nginx.publish(images.get("qcow2"), "small-block.qcow2")),
    }
    daemon.apply("VirtualDisk", "small-block", spec)
    disk = daemon.wait_phase("VirtualDisk", "small-block", "Failed", "Ready")
    ready = next(c for c in disk["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] in ("SizeTooSmall", "TargetTooSmall")
    assert ready["message"] == (
        "the claim's size, 8Mi (8388608 bytes), is smaller than the image's virtual size "
        f"({images.disk_size} bytes)"
    )


def test_a_ready_disk_whose_claim_vanished_is_pvc_lost(daemon) -> None:
    daemon.apply("VirtualDisk", "lost-claim", {"persistentVolumeClaim": {"size": "1Mi"}})
    disk = daemon.wait_phase("VirtualDisk", "lost-claim", "Ready")
    daemon.claim(disk).unlink()
    lost = daemon.wait_phase("VirtualDisk", "lost-claim", "PVCLost", timeout=30)
    assert ready_condition(lost["status"])["reason"] == "PVCLost"
    wait_until(lambda: "PVCLost" in {e["reason"] for e in daemon.events("lost-claim")})


def test_a_worker_killed_outright_fails_the_disk(daemon, faulty, tmp_path) -> None:
    source = tmp_path / "slow.raw"
    source.write_bytes(os.urandom(8 * MiB))
    url = faulty.add("killed.raw", source, piece=64 * 1024, trickle=0.1)
    daemon.apply("VirtualDisk", "killed", {"dataSource": _http(url)})
    daemon.wait_phase("VirtualDisk", "killed", "Provisioning")
    [pid] = wait_until(lambda: _workers_of(daemon.data_dir, "diskferry.importer.worker"))
    os.kill(int(pid), signal.SIGKILL)
    disk = daemon.wait_phase("VirtualDisk", "killed", "Failed", "Ready")
    ready = next(c for c in disk["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "WorkerLost"
    assert ready["message"].startswith("the worker ended without a result (exit code -9)")


def test_an_image_made_from_a_disk(daemon, nginx, images) -> None:
    url = nginx.publish(images.reference, "for-image.raw")
    daemon.apply("VirtualDisk", "base", {"dataSource": _http(url)})
    ref = {"kind": "VirtualDisk", "name": "base"}
    daemon.apply(
        "VirtualImage",
        "from-disk",
        {"storage": "PersistentVolumeClaim", "dataSource": {"type": "ObjectRef", "objectRef": ref}},
    )
    image = daemon.wait_phase("VirtualImage", "from-disk", "Ready", "Failed")
    assert image["status"]["phase"] == "Ready", image["status"]
    disk = daemon.get("VirtualDisk", "base")
    assert image["status"]["sourceUID"] == disk["metadata"]["uid"]
    assert image["status"]["target"]["persistentVolumeClaimName"].startswith("vi-from-disk-")
    assert images.same(daemon.claim(image), images.reference)


@pytest.mark.parametrize("storage_class", ["local", "local-block"])
def test_a_ready_disk_grows_when_its_size_grows(daemon, storage_class, caplog) -> None:
    if storage_class == "local-block" and block_unavailable():
        pytest.skip(block_unavailable())
    caplog.set_level(logging.INFO, logger="diskferry.control")
    claim = {"size": "4Mi", "storageClassName": storage_class}
    daemon.apply("VirtualDisk", "grows", {"persistentVolumeClaim": claim})
    disk = daemon.wait_phase("VirtualDisk", "grows", "Ready")
    assert disk["status"]["capacity"] == "4Mi"
    daemon.objects.patch(
        VIRTUAL_DISKS,
        "default",
        "grows",
        {"spec": {"persistentVolumeClaim": {"size": "8Mi"}}},
        "merge",
    )
    grown = wait_until(
        lambda: (
            (o := daemon.get("VirtualDisk", "grows")) and o["status"].get("capacity") == "8Mi" and o
        )
    )
    assert grown["status"]["phase"] == "Ready"
    assert grown["status"]["observedGeneration"] == 2
    assert daemon.claim(grown).stat().st_size == 8 * MiB
    if storage_class == "local-block":
        out = subprocess.run(
            ["losetup", "--associated", str(daemon.claim(grown)), "--noheadings", "-O", "NAME"],
            capture_output=True,
            text=True,
            check=True,
        )
        with open(out.stdout.strip(), "rb") as device:
            assert device.seek(0, os.SEEK_END) == 8 * MiB
    assert "Resizing" in {e["reason"] for e in daemon.events("grows")}
    assert _worker_said(caplog, "VirtualDisk default/grows", "grow done")
    daemon.objects.delete(VIRTUAL_DISKS, "default", "grows")
    wait_until(lambda: daemon.get("VirtualDisk", "grows") is None)


def test_a_retained_claim_outlives_its_disk(daemon) -> None:
    daemon.objects.create(
        STORAGE_CLASSES,
        None,
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "keep"},
            "provisioner": "diskferry.io/local",
            "reclaimPolicy": "Retain",
        },
    )
    claim = {"size": "2Mi", "storageClassName": "keep"}
    daemon.apply("VirtualDisk", "kept", {"persistentVolumeClaim": claim})
    disk = daemon.wait_phase("VirtualDisk", "kept", "Ready")
    daemon.objects.delete(VIRTUAL_DISKS, "default", "kept")
    wait_until(lambda: daemon.get("VirtualDisk", "kept") is None)
    assert daemon.claim(disk).stat().st_size == 2 * MiB
