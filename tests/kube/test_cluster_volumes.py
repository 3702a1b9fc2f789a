"""Claims as PVCs against the stand-in cluster (its storage provisions and binds; its kubelet
runs the Pods): a disk's claim is a target PVC its disk populates, and a prime PVC beside it that
the worker writes; once written, the prime's volume is handed to the target (its claimRef moved,
as CDI's populators do) and the prime removed; Filesystem claims are a folder holding disk.img,
Block claims a device; a claim is removed with its prime and their volume. What the Pod runner
and the claims ask of the API, deploy/'s ClusterRole grants."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS

from diskferry.control.host.volumes import VolumeClass, VolumeError
from diskferry.control.reconcilers.disks.datasources import claim_name
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.runtime.runner.base import JobState
from diskferry.importer import BlankJob, ImportJob
from diskferry.kube.api import KubeApi
from diskferry.kube.claims import DISK_FILE
from diskferry.kube.client import KubeClient
from diskferry.kube.config import api_client
from diskferry.kube.runner import PodRunner
from diskferry.kube.volumes import SIZE_ANNOTATION, ClusterVolumes, prime_name

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 600)]
MiB = 1 << 20
FILES = VolumeClass("fast")
BLOCKS = VolumeClass("fast", "block")
STORAGE = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: fast}\n"


@pytest.fixture(scope="module")
def image(standin, pinned: str) -> str:
    """The stand-in with its StorageClass; the image its Pods run."""
    kubectl(standin, "apply", "-f", "-", stdin=STORAGE)
    return pinned


def _disk(api: KubeApi, name: str) -> VirtualDisk:
    """A VirtualDisk stored in the stand-in (nothing reconciles it): the owner of its claim."""
    disk = VirtualDisk.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"persistentVolumeClaim": {"size": "1Mi"}},
        }
    )
    return KubeClient(api, REGISTRY).create(disk)


def _pvc(api: KubeApi, name: str) -> dict[str, Any] | None:
    return api.get("v1", "PersistentVolumeClaim", "default", name)


def _bound(api: KubeApi, name: str) -> dict[str, Any]:
    return wait_until(
        lambda: (
            (pvc := _pvc(api, name)) and (pvc.get("status") or {}).get("phase") == "Bound" and pvc
        ),
        30,
        0.2,
    )


def _ended(runner: PodRunner, job_id: str) -> JobState:
    return wait_until(
        lambda: (state := runner.state(job_id)) and not state.running and state, 180, 0.3
    )


def _backing(api: KubeApi, pvc: dict[str, Any]) -> Path:
    pv = api.get("v1", "PersistentVolume", None, pvc["spec"]["volumeName"])
    assert pv is not None
    return Path(pv["spec"]["hostPath"]["path"])


def test_a_claim_is_a_target_populated_through_its_prime(
    api: KubeApi, volumes: ClusterVolumes, runner: PodRunner
) -> None:
    disk = _disk(api, "files")
    name = claim_name(disk)
    claim = volumes.claim(FILES, "default", name, 64 * MiB)
    assert (claim.ready, claim.block, claim.size()) == (False, False, 64 * MiB)
    assert claim.path == f"/claims/default/{name}/{DISK_FILE}"
    target = _pvc(api, name)
    assert target is not None
    assert target["spec"]["dataSourceRef"] == {
        "apiGroup": "diskferry.io",
        "kind": "VirtualDisk",
        "name": "files",
    }
    [owner] = target["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "VirtualDisk",
        "files",
        disk.metadata.uid,
    )
    assert target["metadata"]["annotations"][SIZE_ANNOTATION] == str(64 * MiB)
    asked = target["spec"]["resources"]["requests"]["storage"]
    assert int(asked) > 64 * MiB  # room for the filesystem's own
    prime = _bound(api, prime_name(target))
    assert prime["metadata"]["ownerReferences"][0]["uid"] == target["metadata"]["uid"]
    assert volumes.claim(FILES, "default", name, 64 * MiB) == claim  # found again, as made

    runner.start(f"vd-blank-{disk.metadata.uid}", BlankJob(target=claim.path, size=64 * MiB))
    state = _ended(runner, f"vd-blank-{disk.metadata.uid}")
    assert state.succeeded, runner.log_tail(f"vd-blank-{disk.metadata.uid}")
    pod = api.get("v1", "Pod", "default", f"diskferry-vd-blank-{disk.metadata.uid}")
    assert pod is not None and pod["metadata"]["ownerReferences"][0]["uid"] == disk.metadata.uid
    written = _backing(api, prime) / DISK_FILE
    assert written.stat().st_size == 64 * MiB

    volumes.seal(claim)
    assert _bound(api, name)["spec"]["volumeName"] == prime["spec"]["volumeName"]
    found = volumes.find(FILES, "default", name)
    assert found is not None and found.ready
    wait_until(lambda: _pvc(api, prime_name(target)) is None, 30, 0.2)
    assert volumes.locate([VolumeClass("other"), FILES], "default", name) == found
    assert written.exists()  # the same volume, now the target's
    assert runner.purge(f"vd-blank-{disk.metadata.uid}", keep_scratch=False)

    volumes.remove(FILES, "default", name)
    assert _pvc(api, name) is None
    wait_until(lambda: not written.parent.exists(), 30, 0.2)
    assert volumes.find(FILES, "default", name) is None


def test_a_block_claim_is_a_device_the_worker_writes(
    api: KubeApi, volumes: ClusterVolumes, runner: PodRunner, nginx, tmp_path: Path
) -> None:
    disk = _disk(api, "blocks")
    name = claim_name(disk)
    claim = volumes.claim(BLOCKS, "default", name, 8 * MiB)
    assert claim.block and claim.path == f"/claims/default/{name}/disk"
    target = _pvc(api, name)
    assert target is not None and target["spec"]["volumeMode"] == "Block"
    assert target["spec"]["resources"]["requests"]["storage"] == str(8 * MiB)
    data = os.urandom(MiB)
    (tmp_path / "block.raw").write_bytes(data)
    url = nginx.publish(tmp_path / "block.raw", "block.raw")
    job = ImportJob(source=url, target=claim.path, force=True, size=8 * MiB)
    runner.start(f"vd-{disk.metadata.uid}", job)
    assert _ended(runner, f"vd-{disk.metadata.uid}").succeeded, runner.log_tail(
        f"vd-{disk.metadata.uid}"
    )
    prime = _bound(api, prime_name(target))
    assert _backing(api, prime).read_bytes()[:MiB] == data
    volumes.seal(claim)
    assert _bound(api, name)["spec"]["volumeName"] == prime["spec"]["volumeName"]
    runner.forget(f"vd-{disk.metadata.uid}")
    volumes.remove(BLOCKS, "default", name)


def test_a_prime_not_bound_yet_is_not_sealed(api: KubeApi, volumes: ClusterVolumes) -> None:
    disk = _disk(api, "early")
    claim = volumes.claim(FILES, "default", claim_name(disk), MiB)
    api.delete("v1", "PersistentVolumeClaim", "default", prime_name(_pvc(api, claim.name)))
    with pytest.raises(VolumeError, match="prime"):
        volumes.seal(claim)
    volumes.remove(FILES, "default", claim.name)


def test_a_claim_in_a_cluster_needs_a_size(api: KubeApi, volumes: ClusterVolumes) -> None:
    disk = _disk(api, "sizeless")
    with pytest.raises(VolumeError, match="size"):
        volumes.claim(FILES, "default", claim_name(disk), 0)
    assert _pvc(api, claim_name(disk)) is None


DEPLOY = Path(__file__).parents[2] / "deploy" / "base" / "rbac.yaml"


class RecordingApi(KubeApi):
    """The API, each request recorded as the verb and the resource RBAC names it by."""

    asked: set[tuple[str, str, str]]

    def _asked(self, verb: str, api_version: str, kind: str, sub: str = "") -> None:
        resource = self.resource(api_version, kind)
        self.asked.add((verb, resource.group, resource.name + sub))

    def get(self, api_version, kind, namespace, name):  # type: ignore[no-untyped-def]
        self._asked("get", api_version, kind)
        return super().get(api_version, kind, namespace, name)

    def list(self, api_version, kind, namespace=None, *, label_selector=None):  # type: ignore[no-untyped-def]
        self._asked("list", api_version, kind)
        return super().list(api_version, kind, namespace, label_selector=label_selector)

    def create(self, api_version, kind, namespace, body):  # type: ignore[no-untyped-def]
        self._asked("create", api_version, kind)
        return super().create(api_version, kind, namespace, body)

    def replace(self, api_version, kind, namespace, name, body):  # type: ignore[no-untyped-def]
        self._asked("update", api_version, kind)
        return super().replace(api_version, kind, namespace, name, body)

    def patch(self, api_version, kind, namespace, name, patch, *, subresource=None):  # type: ignore[no-untyped-def]
        self._asked("patch", api_version, kind, f"/{subresource}" if subresource else "")
        return super().patch(api_version, kind, namespace, name, patch, subresource=subresource)

    def delete(self, api_version, kind, namespace, name):  # type: ignore[no-untyped-def]
        self._asked("delete", api_version, kind)
        return super().delete(api_version, kind, namespace, name)

    def pod_log(self, namespace, name, *, tail_lines, limit_bytes):  # type: ignore[no-untyped-def]
        self._asked("get", "v1", "Pod", "/log")
        return super().pod_log(namespace, name, tail_lines=tail_lines, limit_bytes=limit_bytes)


def _granted() -> set[tuple[str, str, str]]:
    """What deploy/'s ClusterRole lets the operator do, by verb, group and resource."""
    [role] = [
        d
        for d in yaml.safe_load_all(DEPLOY.read_text())
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "diskferry-operator"
    ]
    return {
        (verb, group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_runner_and_the_claims_ask_no_more_than_deploy_grants(
    standin, image: str, nginx, images, tmp_path: Path
) -> None:
    api = RecordingApi(api_client(standin.kubeconfig), discovery_cache=tmp_path / "cache.json")
    api.asked = set()
    volumes = ClusterVolumes(api)
    runner = PodRunner(api, image, volumes, "default")
    disk = _disk(api, "asked")
    claim = volumes.claim(FILES, "default", claim_name(disk), 32 * MiB)
    job_id = f"vd-{disk.metadata.uid}"
    url = nginx.publish(images.reference, "asked.raw")
    runner.start(job_id, ImportJob(source=url, target=claim.path, force=True), [])
    runner.write_file(job_id, "token", b"t")
    assert runner.read_file(job_id, "token") == b"t"
    assert _ended(runner, job_id).succeeded
    runner.log_tail(job_id)
    volumes.seal(claim)
    assert runner.purge(job_id, keep_scratch=True) and runner.forget(job_id)
    _bound(api, claim.name)
    assert volumes.locate([FILES], "default", claim.name) is not None
    volumes.remove(FILES, "default", claim.name)
    assert api.asked - _granted() == set()
