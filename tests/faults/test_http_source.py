"""Imports from nginx through a relay that breaks the connection: a correct resume or one
error line naming the source, never wrong bytes, and a retry that succeeds."""

from __future__ import annotations

import hashlib
import json
from urllib.parse import urlsplit

import pytest
from relay import Fault, Relay

from diskferry.disk.http import HttpSource

MiB = 1 << 20


def _through(relay, nginx, images) -> tuple[Relay, str]:
    """A relay to nginx and the URL of the reference disk through it."""
    url = nginx.publish(images.get("raw"))
    parts = urlsplit(url)
    r = relay((parts.hostname, parts.port))
    return r, url.replace(parts.netloc, r.address)


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("kind", ["drop", "reset", "truncate"])
def test_a_broken_body_resumes_and_gives_the_same_bytes(
    diskferry, images, nginx, relay, tmp_path, kind
):
    r, url = _through(relay, nginx, images)
    r.arm(Fault(kind, at=5 * MiB + 17, times=2))
    result = diskferry("import", url, tmp_path / "disk.raw", "--json", "--no-progress")
    assert result.code == 0, result.stderr
    assert r.fired == 2
    assert json.loads(result.stdout)["resumes"] == 2
    assert _sha256(tmp_path / "disk.raw") == _sha256(images.reference)
    assert images.leftovers(tmp_path) == []


def test_a_flipped_status_line_is_retried(diskferry, images, nginx, relay, tmp_path):
    r, url = _through(relay, nginx, images)
    r.arm(Fault("flip", at=5))  # "HTTP/1.1" becomes unreadable
    result = diskferry("import", url, tmp_path / "disk.raw", "--no-progress")
    assert result.code == 0, result.stderr
    assert r.fired == 1
    assert _sha256(tmp_path / "disk.raw") == _sha256(images.reference)


def test_a_flipped_body_byte_fails_the_checksum_and_a_retry_succeeds(
    diskferry, images, nginx, relay, tmp_path
):
    r, url = _through(relay, nginx, images)
    checksum = f"sha256:{_sha256(images.reference)}"
    target = tmp_path / "disk.raw"
    target.write_bytes(b"kept\n")
    r.arm(Fault("flip", at=9 * MiB))
    failed = diskferry("import", url, target, "--checksum", checksum, "--no-progress", "--force")
    assert failed.code == 1, failed.stderr
    assert r.fired == 1
    assert failed.error.startswith(f"{url}: sha256 checksum mismatch")
    assert target.read_bytes() == b"kept\n"
    assert images.leftovers(tmp_path) == []
    again = diskferry("import", url, target, "--checksum", checksum, "--no-progress", "--force")
    assert again.code == 0, again.stderr
    assert _sha256(target) == _sha256(images.reference)


def test_a_source_that_always_breaks_fails_naming_it(diskferry, images, nginx, relay, tmp_path):
    r, url = _through(relay, nginx, images)
    target = tmp_path / "disk.raw"
    r.arm(Fault("reset", times=1000))
    failed = diskferry("import", url, target, "--no-progress")
    assert failed.code == 1, failed.stderr
    assert r.address in failed.error
    assert not target.exists()
    assert images.leftovers(tmp_path) == []
    r.arm(None)
    again = diskferry("import", url, target, "--no-progress")
    assert again.code == 0, again.stderr
    assert _sha256(target) == _sha256(images.reference)


def test_a_stalled_body_resumes_after_the_read_timeout(images, nginx, relay, tmp_path):
    r, url = _through(relay, nginx, images)
    r.arm(Fault("stall", at=3 * MiB))
    source = HttpSource(url, timeout=1.0, backoff=0.1)
    reader = source.open_stream()
    try:
        data = b"".join(iter(lambda: reader.read(MiB), b""))
    finally:
        reader.close()
        source.close()
    assert r.fired == 1
    assert reader.resumes == 1
    assert hashlib.sha256(data).hexdigest() == _sha256(images.reference)
