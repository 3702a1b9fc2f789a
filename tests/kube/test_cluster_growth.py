"""Claims grow as PVCs against the stand-in cluster: a claim's request is raised where its
StorageClass allows volume expansion, the storage expands its volume (the stand-in as a CSI
driver does), a worker Pod grows the disk file of a Filesystem claim (a Block claim's device is
its disk), the disk's new size recorded on its claim; its data stays as it was. A class that
does not allow expansion refuses it, and the claim keeps its request."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from standin_support import EXPANSION_CLASSES

from diskferry.control.host.volumes import Expansion, ExpansionRefusedError, VolumeClass
from diskferry.control.reconcilers.disks.datasources import claim_name
from diskferry.control.reconcilers.disks.volumejobs import grow_job
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.importer import ImportJob
from diskferry.kube.api import KubeApi
from diskferry.kube.client import KubeClient
from diskferry.kube.runner import PodRunner
from diskferry.kube.volumes import ClusterVolumes, PvcClaim, requested

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 600)]
MiB = 1 << 20
GROWING = VolumeClass("growing", provisioner="diskferry.io/standin")
GROWING_BLOCKS = VolumeClass("growing", "block", provisioner="diskferry.io/standin")
FIXED = VolumeClass("fixed", provisioner="diskferry.io/standin")


@pytest.fixture(scope="module")
def image(standin, pinned: str) -> str:
    """The stand-in with its StorageClasses; the image its Pods run."""
    kubectl(standin, "apply", "-f", "-", stdin=EXPANSION_CLASSES)
    return pinned


def _filled(
    api: KubeApi,
    volumes: ClusterVolumes,
    runner: PodRunner,
    volume_class: VolumeClass,
    url: str,
    name: str,
) -> PvcClaim:
    """A Ready claim of 64 MiB of `volume_class` (its disk's), its head imported from `url`."""
    disk = KubeClient(api, REGISTRY).create(
        VirtualDisk.model_validate(
            {
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"persistentVolumeClaim": {"size": "64Mi"}},
            }
        )
    )
    claim = volumes.claim(volume_class, "default", claim_name(disk), 64 * MiB)
    job_id = f"vd-{disk.metadata.uid}"
    runner.start(job_id, ImportJob(source=url, target=claim.path, force=True, size=64 * MiB))
    _succeeded(runner, job_id)
    runner.forget(job_id)
    volumes.seal(claim)
    return wait_until(
        lambda: (
            (found := volumes.find(volume_class, "default", claim.name)) and found.ready and found
        ),
        30,
        0.2,
    )


def _succeeded(runner: PodRunner, job_id: str) -> None:
    state = wait_until(
        lambda: (state := runner.state(job_id)) and not state.running and state, 180, 0.3
    )
    assert state.succeeded, runner.log_tail(job_id)


def _expanded(volumes: ClusterVolumes, claim: PvcClaim, size: int) -> Expansion:
    """The expansion of `claim` to `size`, asked again until the storage has done it."""
    first = volumes.expand(claim, size)
    assert not first.done and "waiting for the storage to expand" in first.message
    return wait_until(
        lambda: (expansion := volumes.expand(claim, size)).done and expansion, 30, 0.2
    )


def _backing(api: KubeApi, claim: PvcClaim) -> Path:
    pvc = api.get("v1", "PersistentVolumeClaim", "default", claim.name)
    assert pvc is not None
    pv = api.get("v1", "PersistentVolume", None, pvc["spec"]["volumeName"])
    assert pv is not None
    return Path(pv["spec"]["hostPath"]["path"])


def _head(tmp_path: Path, nginx, name: str) -> tuple[bytes, str]:
    data = os.urandom(MiB)
    (tmp_path / name).write_bytes(data)
    return data, nginx.publish(tmp_path / name, name)


def test_a_filesystem_claim_grows_its_pvc_then_its_disk_file(
    api: KubeApi, volumes: ClusterVolumes, runner: PodRunner, nginx, tmp_path: Path
) -> None:
    data, url = _head(tmp_path, nginx, "grows.raw")
    claim = _filled(api, volumes, runner, GROWING, url, "grows")
    expansion = _expanded(volumes, claim, 128 * MiB)
    assert expansion.grows_disk
    pvc = api.get("v1", "PersistentVolumeClaim", "default", claim.name)
    assert pvc is not None
    wanted = requested(128 * MiB, block=False)
    assert pvc["spec"]["resources"]["requests"]["storage"] == str(wanted)
    assert pvc["status"]["capacity"]["storage"] == str(wanted)
    grow_id = f"vd-grow-{claim.name[-36:]}"  # the disk's uid
    runner.start(grow_id, grow_job(claim, 128 * MiB))
    _succeeded(runner, grow_id)
    runner.forget(grow_id)
    assert volumes.find(GROWING, "default", claim.name) == claim  # not yet recorded
    volumes.resized(claim, 128 * MiB)
    found = volumes.find(GROWING, "default", claim.name)
    assert found is not None and found.size() == 128 * MiB
    disk = _backing(api, claim) / "disk.img"
    assert disk.stat().st_size == 128 * MiB
    with disk.open("rb") as read:
        assert read.read(MiB) == data
    assert volumes.expand(found, 128 * MiB).done  # asked again: nothing more to do
    volumes.remove(GROWING, "default", claim.name)


def test_a_block_claim_grows_with_its_volume(
    api: KubeApi, volumes: ClusterVolumes, runner: PodRunner, nginx, tmp_path: Path
) -> None:
    data, url = _head(tmp_path, nginx, "grows-block.raw")
    claim = _filled(api, volumes, runner, GROWING_BLOCKS, url, "grows-block")
    expansion = _expanded(volumes, claim, 128 * MiB)
    assert not expansion.grows_disk  # the volume is the disk
    device = _backing(api, claim)
    assert device.stat().st_size == 128 * MiB
    assert device.read_bytes()[:MiB] == data
    volumes.resized(claim, 128 * MiB)
    found = volumes.find(GROWING_BLOCKS, "default", claim.name)
    assert found is not None and found.size() == 128 * MiB
    volumes.remove(GROWING_BLOCKS, "default", claim.name)


def test_a_class_without_volume_expansion_refuses_it(
    api: KubeApi, volumes: ClusterVolumes, runner: PodRunner, nginx, tmp_path: Path
) -> None:
    _, url = _head(tmp_path, nginx, "fixed.raw")
    claim = _filled(api, volumes, runner, FIXED, url, "fixed")
    with pytest.raises(ExpansionRefusedError, match=r"fixed .* allowVolumeExpansion: true"):
        volumes.expand(claim, 128 * MiB)
    pvc = api.get("v1", "PersistentVolumeClaim", "default", claim.name)
    assert pvc is not None
    assert pvc["spec"]["resources"]["requests"]["storage"] == str(requested(64 * MiB, False))
    volumes.remove(FIXED, "default", claim.name)
