"""The image sources end to end, over the real store, the manager and real workers: disks and
images from a container registry, uploads into disks and images, images kept in the image
store and disks made from them, and deletes that leave nothing behind."""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from control_support import wait_until
from reconcile_support import Daemon
from reconcile_support import http_source as _http
from registry_support import PASSWORD, USER

from diskferry.control.resources.core import SECRETS
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS
from diskferry.control.resources.virtualimage import CLUSTER_VIRTUAL_IMAGES, VIRTUAL_IMAGES
from diskferry.disk.progress import Progress
from diskferry.importer.engine import run_import
from diskferry.importer.image_push import push_image
from diskferry.importer.job import ImportJob, ImportPhase
from diskferry.registry.layout import parse_layout_reference

MiB = 1 << 20
PATCH = "application/merge-patch+json"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "data")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def pushed(registry, images) -> str:
    """A qcow2 containerDisk in the registry, named as Deckhouse users write it (no scheme)."""
    job = ImportJob(source=str(images.get("qcow2")), target="", format="qcow2", insecure=True)
    push_image(job, f"docker://{registry.address}/disks/small:1", Progress())
    return f"{registry.address}/disks/small:1"


def _container_image(image: str, **extra: Any) -> dict[str, Any]:
    return {"type": "ContainerImage", "containerImage": {"image": image, **extra}}


def _upload(url: str, body: bytes, ca: Path) -> int:
    """PUT `body` to an upload URL, verified with the daemon's CA; the status code."""
    parts = urlsplit(url)
    context = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection(parts.hostname, parts.port, context=context, timeout=60)
    try:
        conn.request("PUT", parts.path, body=body)
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_disk_from_a_container_image_is_ready_with_its_bytes(daemon, pushed, images) -> None:
    spec = {"persistentVolumeClaim": {"size": "40Mi"}, "dataSource": _container_image(pushed)}
    daemon.apply("VirtualDisk", "from-registry", spec)
    disk = daemon.wait_phase("VirtualDisk", "from-registry", "Ready", "Failed")
    assert disk["status"]["phase"] == "Ready", disk["status"]
    assert disk["status"]["capacity"] == "40Mi"
    claim = daemon.claim(disk)
    assert claim.stat().st_size == 40 * MiB
    with open(claim, "rb") as f:
        assert f.read(images.disk_size) == images.reference.read_bytes()


def test_a_missing_pull_secret_keeps_the_disk_pending_then_a_bad_one_fails(daemon, pushed) -> None:
    source = _container_image(pushed, imagePullSecret={"name": "creds"})
    daemon.apply("VirtualDisk", "secret", {"dataSource": source})
    disk = daemon.wait_phase("VirtualDisk", "secret", "Pending")
    wait_until(
        lambda: "pull Secret creds" in str((daemon.get("VirtualDisk", "secret") or {})["status"])
    )
    missing = _container_image("127.0.0.1:1/none/such:1")
    daemon.apply("VirtualDisk", "unreachable", {"dataSource": missing})
    failed = daemon.wait_phase("VirtualDisk", "unreachable", "Ready", "Failed")
    assert failed["status"]["phase"] == "Failed"
    assert disk["status"]["phase"] == "Pending"


def test_a_private_registry_through_a_pull_secret_and_a_ca_bundle(
    daemon, basic_registry, tls, images
) -> None:
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    config = json.dumps({"auths": {basic_registry.address: {"auth": auth}}})
    authfile = daemon.data_dir.parent / "auth.json"
    authfile.write_text(config)
    job = ImportJob(
        source=str(images.get("qcow2")),
        target="",
        format="qcow2",
        authfile=str(authfile),
        caBundle=str(tls.ca),
    )
    push_image(job, f"docker://{basic_registry.address}/private/disk:1", Progress())
    daemon.objects.create(
        SECRETS,
        "default",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds"},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": config},
        },
    )
    bundle = base64.b64encode(tls.ca.read_bytes()).decode()
    source = _container_image(
        f"{basic_registry.address}/private/disk:1", imagePullSecret={"name": "creds"},
        caBundle=bundle,
    )  # fmt: skip
    daemon.apply("VirtualImage", "private", {"dataSource": source})
    image = daemon.wait_phase("VirtualImage", "private", "Ready", "Failed")
    assert image["status"]["phase"] == "Ready", image["status"]
    assert image["status"]["format"] == "qcow2"
    no_creds = _container_image(f"{basic_registry.address}/private/disk:1", caBundle=bundle)
    daemon.apply("VirtualDisk", "no-creds", {"dataSource": no_creds})
    refused = daemon.wait_phase("VirtualDisk", "no-creds", "Ready", "Failed")
    ready = next(c for c in refused["status"]["conditions"] if c["type"] == "Ready")
    assert refused["status"]["phase"] == "Failed"
    assert ready["reason"] == "Unauthorized" and "\n" not in ready["message"], ready
    assert "spec.dataSource.containerImage.imagePullSecret" in ready["message"]
    assert "--creds" not in ready["message"] and "--authfile" not in ready["message"]
    assert PASSWORD not in json.dumps(daemon.events("private") + daemon.events("no-creds"))


def test_a_web_page_for_a_disk_fails_naming_the_field_to_change(daemon, nginx, tmp_path) -> None:
    page = tmp_path / "index.html"
    page.write_text("<html><body>" + "x" * 1012 + "</body></html>\n")
    daemon.apply("VirtualDisk", "page", {"dataSource": _http(nginx.publish(page, "page.html"))})
    failed = daemon.wait_phase("VirtualDisk", "page", "Ready", "Failed")
    ready = next(c for c in failed["status"]["conditions"] if c["type"] == "Ready")
    assert failed["status"]["phase"] == "Failed" and ready["reason"] == "NotADiskImage"
    assert "spec.dataSource" in ready["message"] and "--no-content-check" not in ready["message"]


def test_an_image_in_the_store_and_a_disk_from_it(daemon, nginx, images) -> None:
    url = nginx.publish(images.get("qcow2"), "stored.qcow2")
    daemon.apply("VirtualImage", "vi1", {"dataSource": _http(url)})
    image = daemon.wait_phase("VirtualImage", "vi1", "Ready", "Failed")
    status = image["status"]
    assert status["phase"] == "Ready", status
    reference = status["target"]["registryURL"]
    folder, tag = parse_layout_reference(reference)
    assert folder == daemon.data_dir / "images" / "vi" / "default" / "vi1"
    assert tag == image["metadata"]["uid"]
    assert status["format"] == "qcow2" and status["cdrom"] is False
    assert status["size"]["unpackedBytes"] == str(images.disk_size)
    assert status["size"]["unpacked"] == "32Mi"
    assert 0 < int(status["size"]["storedBytes"]) < images.disk_size
    assert "persistentVolumeClaimName" not in status["target"]
    ref = {"type": "ObjectRef", "objectRef": {"kind": "VirtualImage", "name": "vi1"}}
    daemon.apply("VirtualDisk", "vd-from-store", {"dataSource": ref})
    disk = daemon.wait_phase("VirtualDisk", "vd-from-store", "Ready", "Failed")
    assert disk["status"]["phase"] == "Ready", disk["status"]
    assert disk["status"]["sourceUID"] == image["metadata"]["uid"]
    assert images.same(daemon.claim(disk), images.reference)
    daemon.objects.delete(VIRTUAL_IMAGES, "default", "vi1")
    wait_until(lambda: daemon.get("VirtualImage", "vi1") is None)
    assert not folder.exists()
    assert daemon.get("VirtualDisk", "vd-from-store")["status"]["phase"] == "Ready"


def test_an_image_from_a_disk_stores_what_the_disk_holds(daemon) -> None:
    """A VirtualImage in the store made from a 1 GiB VirtualDisk holding 8 MiB keeps about
    8 MiB (a qcow2 of what is allocated), not the disk's virtual size; a disk made from it
    has the same bytes."""
    daemon.apply("VirtualDisk", "big", {"persistentVolumeClaim": {"size": "1Gi"}})
    disk = daemon.claim(daemon.wait_phase("VirtualDisk", "big", "Ready", "Failed"))
    written = {i * 128 * MiB: os.urandom(MiB) for i in range(8)}
    with disk.open("r+b") as f:
        for offset, data in written.items():
            f.seek(offset)
            f.write(data)
    source = {"type": "ObjectRef", "objectRef": {"kind": "VirtualDisk", "name": "big"}}
    daemon.apply("VirtualImage", "from-disk", {"dataSource": source})
    image = daemon.wait_phase("VirtualImage", "from-disk", "Ready", "Failed", timeout=300)
    status = image["status"]
    assert status["phase"] == "Ready", status
    layout = parse_layout_reference(status["target"]["registryURL"])[0]
    kept = sum(blob.stat().st_size for blob in (layout / "blobs").rglob("*") if blob.is_file())
    assert 8 * MiB < kept < 10 * MiB
    assert 8 * MiB < int(status["size"]["storedBytes"]) < 10 * MiB
    assert status["size"]["unpackedBytes"] == str(1 << 30)
    ref = {"type": "ObjectRef", "objectRef": {"kind": "VirtualImage", "name": "from-disk"}}
    daemon.apply("VirtualDisk", "back", {"dataSource": ref})
    back = daemon.claim(daemon.wait_phase("VirtualDisk", "back", "Ready", "Failed"))
    assert back.stat().st_size == 1 << 30
    with back.open("rb") as f:
        for offset, data in written.items():
            f.seek(offset)
            assert f.read(MiB) == data


def test_an_image_whose_store_entry_is_gone_is_image_lost(daemon, nginx, images) -> None:
    url = nginx.publish(images.get("raw"), "lost.raw")
    daemon.apply("VirtualImage", "lost", {"dataSource": _http(url)})
    image = daemon.wait_phase("VirtualImage", "lost", "Ready", "Failed")
    assert image["status"]["format"] == "raw"
    folder = parse_layout_reference(image["status"]["target"]["registryURL"])[0]
    shutil.rmtree(folder)
    patch = json.dumps({"metadata": {"labels": {"poke": "1"}}})
    daemon.objects.patch(VIRTUAL_IMAGES, "default", "lost", patch, PATCH)
    lost = daemon.wait_phase("VirtualImage", "lost", "ImageLost")
    assert lost["status"]["phase"] == "ImageLost"
    # the Event follows the status write
    wait_until(lambda: "ImageLost" in {e["reason"] for e in daemon.events("lost")}, 10)


class PhaseLog(Progress):
    """Remembers the percent at which each phase began."""

    def __init__(self) -> None:
        super().__init__()
        self.phases: list[tuple[str, float]] = []

    def set_phase(self, phase: str) -> None:
        super().set_phase(phase)
        self.phases.append((phase, self.percent))


def test_a_disk_from_the_store_counts_half_for_the_store_and_half_for_the_volume(
    daemon, nginx, images, tmp_path
) -> None:
    url = nginx.publish(images.get("qcow2"), "staged.qcow2")
    daemon.apply("VirtualImage", "staged", {"dataSource": _http(url)})
    image = daemon.wait_phase("VirtualImage", "staged", "Ready", "Failed")
    reference = image["status"]["target"]["registryURL"]
    # what the VirtualDisk's worker runs: a qcow2 from the store is staged, then converted
    progress = PhaseLog()
    job = ImportJob(source=reference, target=str(tmp_path / "disk.img"), size=40 * MiB)
    run_import(job, progress)
    converting = dict(progress.phases)[ImportPhase.CONVERTING]
    assert 49.0 <= converting <= 51.0
    assert progress.percent == 100.0


def test_a_cluster_image_from_a_registry_and_a_disk_from_it(daemon, pushed, images) -> None:
    daemon.objects.create(
        CLUSTER_VIRTUAL_IMAGES,
        None,
        {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "ClusterVirtualImage",
            "metadata": {"name": "cvi1"},
            "spec": {"dataSource": _container_image(pushed)},
        },
    )
    image = wait_until(
        lambda: (
            (o := daemon.objects.get(CLUSTER_VIRTUAL_IMAGES, None, "cvi1"))
            and o.get("status", {}).get("phase") in ("Ready", "Failed")
            and o
        ),
        120,
    )
    assert image["status"]["phase"] == "Ready", image["status"]
    assert "/images/cvi/cvi1:" in image["status"]["target"]["registryURL"]
    ref = {"type": "ObjectRef", "objectRef": {"kind": "ClusterVirtualImage", "name": "cvi1"}}
    spec = {"persistentVolumeClaim": {"size": "33Mi"}, "dataSource": ref}
    daemon.apply("VirtualDisk", "vd-from-cvi", spec)
    disk = daemon.wait_phase("VirtualDisk", "vd-from-cvi", "Ready", "Failed")
    assert disk["status"]["phase"] == "Ready", disk["status"]
    poke = '{"metadata": {"labels": {"poke": "1"}}}'
    daemon.objects.patch(CLUSTER_VIRTUAL_IMAGES, None, "cvi1", poke, PATCH)
    used = wait_until(
        lambda: daemon.objects.get(CLUSTER_VIRTUAL_IMAGES, None, "cvi1")["status"].get(
            "usedInNamespaces"
        )
    )
    assert used == ["default"]
    with open(daemon.claim(disk), "rb") as f:
        assert f.read(images.disk_size) == images.reference.read_bytes()


def _upload_urls(daemon: Daemon, kind: str, name: str) -> dict[str, str]:
    waiting = daemon.wait_phase(kind, name, "WaitForUserUpload", "Failed")
    assert waiting["status"]["phase"] == "WaitForUserUpload", waiting["status"]
    return waiting["status"]["imageUploadURLs"]


def test_an_upload_into_a_disk_then_ready(daemon, images) -> None:
    daemon.apply(
        "VirtualDisk",
        "up",
        {"persistentVolumeClaim": {"size": "40Mi"}, "dataSource": {"type": "Upload"}},
    )
    urls = _upload_urls(daemon, "VirtualDisk", "up")
    external, internal = urlsplit(urls["external"]), urlsplit(urls["inCluster"])
    assert external.path.endswith(internal.path) and internal.path.startswith("/upload/")
    assert len(internal.path.removeprefix("/upload/")) >= 32
    assert (external.scheme, internal.scheme) == ("https", "https")
    ca = daemon.data_dir / "pki" / "ca.crt"
    assert _upload(urls["inCluster"], images.get("qcow2").read_bytes(), ca) == 200
    disk = daemon.wait_phase("VirtualDisk", "up", "Ready", "Failed")
    assert disk["status"]["phase"] == "Ready", disk["status"]
    claim = daemon.claim(disk)
    assert claim.stat().st_size == 40 * MiB
    with open(claim, "rb") as f:
        assert f.read(images.disk_size) == images.reference.read_bytes()
    with pytest.raises(OSError):  # the server ended with its upload
        _upload(urls["inCluster"], b"again", ca)


def test_an_upload_into_the_store(daemon, images) -> None:
    daemon.apply("VirtualImage", "up-image", {"dataSource": {"type": "Upload"}})
    urls = _upload_urls(daemon, "VirtualImage", "up-image")
    ca = daemon.data_dir / "pki" / "ca.crt"
    assert _upload(urls["external"], images.get("qcow2").read_bytes(), ca) == 200
    image = daemon.wait_phase("VirtualImage", "up-image", "Ready", "Failed")
    assert image["status"]["phase"] == "Ready", image["status"]
    assert image["status"]["size"]["unpackedBytes"] == str(images.disk_size)
    wait_until(lambda: not list((daemon.data_dir / "staging").rglob("*.img*")))
    layout = parse_layout_reference(image["status"]["target"]["registryURL"])[0]
    assert json.loads((layout / "index.json").read_text())["manifests"]


def test_deleting_a_disk_waiting_for_its_upload_stops_the_server(daemon) -> None:
    daemon.apply(
        "VirtualDisk",
        "never",
        {"persistentVolumeClaim": {"size": "8Mi"}, "dataSource": {"type": "Upload"}},
    )
    urls = _upload_urls(daemon, "VirtualDisk", "never")
    daemon.objects.delete(VIRTUAL_DISKS, "default", "never")
    wait_until(lambda: daemon.get("VirtualDisk", "never") is None)
    ca = daemon.data_dir / "pki" / "ca.crt"
    with pytest.raises(OSError):
        _upload(urls["inCluster"], b"late", ca)
    # the export proxy, which routed the upload, stops too once it routes nothing
    jobs = daemon.data_dir / "jobs"
    wait_until(lambda: sorted(p.name for p in jobs.iterdir()) == ["failed", "logs"], 60)
    assert list((daemon.data_dir / "volumes").rglob("*.img*")) == []


def test_a_daemon_started_again_keeps_the_upload_server_and_its_urls(tmp_path, images) -> None:
    first = Daemon(tmp_path / "data")
    try:
        first.apply(
            "VirtualDisk",
            "kept",
            {"persistentVolumeClaim": {"size": "40Mi"}, "dataSource": {"type": "Upload"}},
        )
        urls = _upload_urls(first, "VirtualDisk", "kept")
    finally:
        first.stop()
    second = Daemon(tmp_path / "data", proxy_port=first.proxy_port)
    try:
        ca = second.data_dir / "pki" / "ca.crt"
        assert _upload(urls["external"], images.get("qcow2").read_bytes(), ca) == 200
        disk = second.wait_phase("VirtualDisk", "kept", "Ready", "Failed")
        assert disk["status"]["phase"] == "Ready", disk["status"]
        assert disk["status"]["imageUploadURLs"] == urls
        with open(second.claim(disk), "rb") as f:
            assert f.read(images.disk_size) == images.reference.read_bytes()
    finally:
        second.stop()
