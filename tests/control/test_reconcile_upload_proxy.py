"""Upload sources in the control plane: the external URL through the export proxy (resumable
from diskferry's client), the optional wait timeout (UploadTimedOut), and the token renewed
once it has expired, the old URLs then refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from control_support import stop_workers_under, wait_until
from reconcile_support import Daemon, put_upload

from diskferry.control.host.embedded.proxy import PROXY_JOB
from diskferry.control.reconcilers.disks.uploads import (
    ROUTE_NAMESPACE,
    TIMEOUT_ANNOTATION,
    TOKEN_TTL_ANNOTATION,
)
from diskferry.control.resources.model import API_VERSION
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS
from diskferry.importer.upload_client import upload_file

UPLOAD_SPEC = {"persistentVolumeClaim": {"size": "40Mi"}, "dataSource": {"type": "Upload"}}


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "data")
    yield running
    running.stop()
    # the workers outlive the daemon, for the next one to take on; an upload waits for ever
    stop_workers_under(tmp_path)


def _disk(daemon: Daemon, name: str, annotations: dict[str, str] | None = None) -> None:
    metadata = {"name": name, "annotations": annotations or {}}
    body = {"apiVersion": API_VERSION, "kind": "VirtualDisk", "metadata": metadata}
    daemon.objects.create(VIRTUAL_DISKS, "default", {**body, "spec": UPLOAD_SPEC})


def _waiting(daemon: Daemon, name: str) -> dict:
    disk = daemon.wait_phase("VirtualDisk", name, "WaitForUserUpload", "Failed")
    assert disk["status"]["phase"] == "WaitForUserUpload", disk["status"]
    return disk


def test_the_external_url_goes_through_the_export_proxy(daemon, images) -> None:
    _disk(daemon, "proxied")
    disk = _waiting(daemon, "proxied")
    urls = disk["status"]["imageUploadURLs"]
    external, internal = urlsplit(urls["external"]), urlsplit(urls["inCluster"])
    assert external.port == daemon.proxy_port != internal.port
    route = f"/namespaces/{ROUTE_NAMESPACE}/virtualmachineexports/vd-{disk['metadata']['uid']}"
    assert external.path == f"/api/export.kubevirt.io/v1{route}{internal.path}"
    ca = daemon.data_dir / "pki" / "ca.crt"
    image = images.get("qcow2", "gzip")
    answer = upload_file(str(image), urls["external"], ca_bundle=str(ca))
    assert "complete" in answer
    ready = daemon.wait_phase("VirtualDisk", "proxied", "Ready", "Failed")
    assert ready["status"]["phase"] == "Ready", ready["status"]
    with open(daemon.claim(ready), "rb") as f:
        assert f.read(images.disk_size) == images.reference.read_bytes()
    proxy = daemon.controllers.proxy
    wait_until(lambda: (ROUTE_NAMESPACE, f"vd-{disk['metadata']['uid']}") not in proxy.routes())
    proxy_log = daemon.data_dir / "jobs" / "logs" / "export-proxy.log"
    shown = proxy_log.read_text() if proxy_log.exists() else ""
    assert internal.path.removeprefix("/upload/") not in shown


def test_a_disk_that_waits_past_its_upload_timeout_fails(daemon) -> None:
    _disk(daemon, "late", {TIMEOUT_ANNOTATION: "1s"})
    failed = daemon.wait_phase("VirtualDisk", "late", "Failed")
    ready = next(c for c in failed["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "UploadTimedOut"
    assert "no upload was under way 1s after" in ready["message"]
    runner = daemon.controllers.runner
    job = f"vd-{failed['metadata']['uid']}"
    wait_until(lambda: (s := runner.state(job)) is None or not s.running)
    assert any(e["reason"] == "UploadTimedOut" for e in daemon.events("late"))


def test_a_disk_without_a_timeout_keeps_waiting(daemon) -> None:
    _disk(daemon, "patient")
    _waiting(daemon, "patient")
    _disk(daemon, "bad-timeout", {TIMEOUT_ANNOTATION: "soon"})
    failed = daemon.wait_phase("VirtualDisk", "bad-timeout", "Failed")
    ready = next(c for c in failed["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "InvalidDuration"
    assert daemon.get("VirtualDisk", "patient")["status"]["phase"] == "WaitForUserUpload"


def test_an_expired_token_is_renewed_and_the_old_urls_refused(daemon, images) -> None:
    _disk(daemon, "renewed", {TOKEN_TTL_ANNOTATION: "2s"})
    first = _waiting(daemon, "renewed")["status"]["imageUploadURLs"]
    second = wait_until(
        lambda: (
            (urls := daemon.get("VirtualDisk", "renewed")["status"].get("imageUploadURLs"))
            and urls["inCluster"] != first["inCluster"]
            and urls
        ),
        60,
    )
    ca = daemon.data_dir / "pki" / "ca.crt"
    runner = daemon.controllers.runner
    wait_until(lambda: (s := runner.state(PROXY_JOB)) and s.progress)  # the proxy listens
    assert put_upload(first["inCluster"], b"stale", ca) == 404
    assert put_upload(first["external"], b"stale", ca) == 404
    assert urlsplit(second["inCluster"]).port == urlsplit(first["inCluster"]).port
    status = 404
    # the token may be renewed again between reading the URL and using it
    for _ in range(5):
        urls = daemon.get("VirtualDisk", "renewed")["status"]["imageUploadURLs"]
        status = put_upload(urls["inCluster"], images.get("qcow2").read_bytes(), ca)
        if status == 200:
            break
    assert status == 200
    ready = daemon.wait_phase("VirtualDisk", "renewed", "Ready", "Failed")
    assert ready["status"]["phase"] == "Ready", ready["status"]
