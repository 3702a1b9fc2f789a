"""An Upload source's `dataSource.upload.checksum`, as Deckhouse takes it: the bytes uploaded
are checked against its strongest digest; a match is Ready, a mismatch fails the disk or the
image with the reason ChecksumMismatch, naming both digests, and stops its upload server."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import stop_workers_under, wait_until
from reconcile_support import Daemon, put_upload

from diskferry.control.resources.model import API_VERSION
from diskferry.control.resources.registry import REGISTRY


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "data")
    yield running
    running.stop()
    stop_workers_under(tmp_path)


def _create(daemon: Daemon, kind: str, name: str, checksum: dict[str, str]) -> None:
    spec: dict[str, Any] = {"dataSource": {"type": "Upload", "upload": {"checksum": checksum}}}
    if kind == "VirtualDisk":
        spec["persistentVolumeClaim"] = {"size": "40Mi"}
    body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}
    daemon.objects.create(REGISTRY.by_kind(kind), "default", body)


def _upload(daemon: Daemon, kind: str, name: str, data: bytes) -> int:
    """Upload `data` once the object waits for it; the upload server's answer."""
    waiting = daemon.wait_phase(kind, name, "WaitForUserUpload", "Failed")
    assert waiting["status"]["phase"] == "WaitForUserUpload", waiting["status"]
    url = waiting["status"]["imageUploadURLs"]["inCluster"]
    return put_upload(url, data, daemon.data_dir / "pki" / "ca.crt")


def test_an_upload_that_matches_its_checksum_is_ready(daemon, images) -> None:
    data = images.get("qcow2").read_bytes()
    _create(daemon, "VirtualDisk", "good", {"sha256": hashlib.sha256(data).hexdigest()})
    assert _upload(daemon, "VirtualDisk", "good", data) == 200
    ready = daemon.wait_phase("VirtualDisk", "good", "Ready", "Failed")
    assert ready["status"]["phase"] == "Ready", ready["status"]
    with open(daemon.claim(ready), "rb") as f:
        assert f.read(images.disk_size) == images.reference.read_bytes()


@pytest.mark.parametrize("kind", ["VirtualDisk", "VirtualImage"])
def test_an_upload_that_differs_from_its_checksum_fails(daemon, images, kind) -> None:
    data = images.get("qcow2").read_bytes()
    expected = hashlib.sha256(b"another image").hexdigest()
    checksum = {"md5": hashlib.md5(data).hexdigest(), "sha256": expected}  # the strongest counts
    _create(daemon, kind, "bad", checksum)
    assert _upload(daemon, kind, "bad", data) == 400
    failed = daemon.wait_phase(kind, "bad", "Failed", "Ready")
    ready = next(c for c in failed["status"]["conditions"] if c["type"] == "Ready")
    assert (failed["status"]["phase"], ready["reason"]) == ("Failed", "ChecksumMismatch")
    assert f"expected {expected}, got {hashlib.sha256(data).hexdigest()}" in ready["message"]
    assert ("Warning", "ChecksumMismatch") in {
        (e["type"], e["reason"]) for e in daemon.events("bad")
    }
    runner = daemon.controllers.runner
    prefix = "vd" if kind == "VirtualDisk" else "vi-upload"
    job = f"{prefix}-{failed['metadata']['uid']}"
    wait_until(lambda: (state := runner.state(job)) is None or not state.running)
