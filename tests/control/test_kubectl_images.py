"""The real kubectl against a real `diskferry serve` with its controllers: an upload with curl
to the URL in status, a VirtualDisk from a container registry, a VirtualImage in the image
store and a VirtualDisk from it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_support import Served, kubectl, start_daemon

from diskferry.disk.progress import Progress
from diskferry.importer.image_push import push_image
from diskferry.importer.job import ImportJob

WAIT = "--timeout=50s"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One daemon with its controllers for the module's tests."""
    base = tmp_path_factory.mktemp("kubectl-images")
    served = start_daemon(base / "data", base / "daemon.log", options=())
    yield served
    assert served.stop() == 0


def _wait(daemon: Served, what: str, phase: str) -> None:
    jsonpath = f"--for=jsonpath={{.status.phase}}={phase}"
    assert "condition met" in kubectl(daemon, "wait", what, jsonpath, WAIT)


def _get(daemon: Served, what: str) -> dict:
    return json.loads(kubectl(daemon, "get", what, "-o", "json"))


def _head(path: Path, n: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def _claim(daemon: Served, disk: dict) -> Path:
    status = disk["status"]
    name = status["target"]["persistentVolumeClaimName"]
    return daemon.data_dir / "volumes" / status["storageClassName"] / "default" / f"{name}.img"


def test_upload_with_curl_to_the_url_in_status(daemon: Served, images) -> None:
    manifest = """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {name: uploaded, namespace: default}
spec:
  persistentVolumeClaim: {size: 40Mi}
  dataSource: {type: Upload}
"""
    kubectl(daemon, "apply", "--validate=strict", "-f", "-", stdin=manifest)
    _wait(daemon, "vd/uploaded", "WaitForUserUpload")
    jsonpath = "jsonpath={.status.imageUploadURLs.external}"
    url = kubectl(daemon, "get", "vd", "uploaded", "-o", jsonpath)
    assert "/upload/" in url
    curl = [
        "curl", "--silent", "--show-error", "--fail", "--cacert",
        str(daemon.data_dir / "pki" / "ca.crt"), "-T", str(images.get("qcow2")), url,
    ]  # fmt: skip
    done = subprocess.run(curl, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    _wait(daemon, "vd/uploaded", "Ready")
    disk = _get(daemon, "vd/uploaded")
    assert disk["status"]["capacity"] == "40Mi"
    claim = _claim(daemon, disk)
    assert _head(claim, images.disk_size) == images.reference.read_bytes()


def test_a_disk_from_a_local_registry(daemon: Served, registry, images) -> None:
    job = ImportJob(source=str(images.get("qcow2")), target="", format="qcow2", insecure=True)
    push_image(job, f"docker://{registry.address}/kubectl/disk:v1", Progress())
    manifest = f"""\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: from-registry, namespace: default}}
spec:
  persistentVolumeClaim: {{size: 36Mi}}
  dataSource:
    type: ContainerImage
    containerImage: {{image: "{registry.address}/kubectl/disk:v1"}}
"""
    kubectl(daemon, "apply", "--validate=strict", "-f", "-", stdin=manifest)
    _wait(daemon, "vd/from-registry", "Ready")
    disk = _get(daemon, "vd/from-registry")
    assert _head(_claim(daemon, disk), images.disk_size) == images.reference.read_bytes()


def test_an_image_in_the_store_and_a_disk_from_it(daemon: Served, nginx, images) -> None:
    url = nginx.publish(images.get("qcow2"), "kubectl-stored.qcow2")
    manifest = f"""\
apiVersion: diskferry.io/v1alpha1
kind: VirtualImage
metadata: {{name: stored, namespace: default}}
spec:
  storage: ContainerRegistry
  dataSource:
    type: HTTP
    http: {{url: "{url}"}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: from-stored, namespace: default}}
spec:
  dataSource:
    type: ObjectRef
    objectRef: {{kind: VirtualImage, name: stored}}
"""
    kubectl(daemon, "apply", "--validate=strict", "-f", "-", stdin=manifest)
    _wait(daemon, "vi/stored", "Ready")
    image = _get(daemon, "vi/stored")
    size = image["status"]["size"]
    assert size["unpacked"] == "32Mi" and size["unpackedBytes"] == str(images.disk_size)
    assert int(size["storedBytes"]) > 0 and size["stored"]
    registry_url = image["status"]["target"]["registryURL"]
    assert registry_url.startswith(f"oci:{daemon.data_dir}/images/vi/default/stored:")
    wide = kubectl(daemon, "get", "vi", "stored", "-o", "wide").splitlines()
    assert "STOREDSIZE" in wide[0] and "32Mi" in wide[1]
    _wait(daemon, "vd/from-stored", "Ready")
    disk = _get(daemon, "vd/from-stored")
    assert disk["status"]["sourceUID"] == image["metadata"]["uid"]
    assert images.same(_claim(daemon, disk), images.reference)
    kubectl(daemon, "delete", "vi", "stored", "--timeout=50s")
    assert not (daemon.data_dir / "images" / "vi" / "default" / "stored").exists()
