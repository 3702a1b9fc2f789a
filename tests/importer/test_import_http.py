"""Imports over HTTP(S): nginx with real Range, and a server that fails in chosen ways."""

from __future__ import annotations

import hashlib
import json

import pytest

from diskferry.disk.http_owned import OwnedResponse
from diskferry.disk.progress import Progress
from diskferry.importer.engine import run_import
from diskferry.importer.job import ImportJob


def imported(diskferry, url, target, *options):
    result = diskferry("import", url, target, "--json", *options)
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("fmt", "compression"), [("raw", None), ("qcow2", None), ("raw", "gzip"), ("vmdk", "zstd")]
)
def test_import_from_nginx(diskferry, images, nginx, tmp_path, fmt, compression):
    url = nginx.publish(images.get(fmt, compression))
    out = imported(diskferry, url, tmp_path / "disk.raw")
    assert images.same(images.reference, tmp_path / "disk.raw")
    assert out["sourceFormat"] == fmt
    assert out["compression"] == compression
    assert out["bytesRead"] == images.get(fmt, compression).stat().st_size
    assert images.allocated(tmp_path / "disk.raw") <= images.data_bytes + 512 * 1024
    assert images.leftovers(tmp_path) == []


def test_a_raw_body_is_read_straight_into_the_copy_buffers(images, nginx, tmp_path, monkeypatch):
    # on connections of the source's own, with no buffer or copy of urllib3's between
    read: list[int] = []
    readinto = OwnedResponse.readinto

    def counted(self, buf):
        n = readinto(self, buf)
        read.append(n)
        return n

    monkeypatch.setattr(OwnedResponse, "readinto", counted)
    target = tmp_path / "disk.raw"
    run_import(ImportJob(source=nginx.publish(images.get("raw")), target=str(target)), Progress())
    assert images.same(images.reference, target)
    assert sum(read) == images.disk_size


@pytest.mark.parametrize(("fmt", "compression"), [("raw", "gzip"), ("qcow2", "gzip")])
def test_dropped_connection_resumes_with_range(
    diskferry, images, faulty, tmp_path, fmt, compression
):
    source = images.get(fmt, compression)
    cut = source.stat().st_size // 3 + 123
    url = faulty.add("disk", source, drop_after=cut, drops=2)
    out = imported(diskferry, url, tmp_path / "disk.raw")
    assert images.same(images.reference, tmp_path / "disk.raw")
    assert out["resumes"] == 2
    ranges = [h.get("Range") for h in faulty.seen("disk")]
    assert ranges == [None, f"bytes={cut}-", f"bytes={2 * cut}-"]


def test_server_without_range_restarts_when_nothing_was_written(
    diskferry, images, faulty, tmp_path
):
    url = faulty.add("disk", images.get("raw", "gzip"), ranges=False, drop_after=1000)
    out = imported(diskferry, url, tmp_path / "disk.raw")
    assert images.same(images.reference, tmp_path / "disk.raw")
    assert [h.get("Range") for h in faulty.seen("disk")] == [None, "bytes=1000-", None]
    assert out["bytesRead"] == images.get("raw", "gzip").stat().st_size


def test_server_without_range_fails_clearly_once_data_was_written(refuse, images, faulty):
    source = images.get("raw")
    url = faulty.add("disk", source, ranges=False, drop_after=images.disk_size // 2)
    error = refuse(url)
    assert error == (
        f"{url}: the server does not support Range requests, "
        f"so the transfer cannot resume at byte {images.disk_size // 2}"
    )


def test_source_changing_during_the_import_fails_clearly(refuse, images, faulty):
    half = images.disk_size // 2
    url = faulty.add("disk", images.get("raw"), drop_after=half, changing=True)
    # with a checksum the bytes are streamed in order, and the stream cannot resume
    digest = hashlib.sha256(images.get("raw").read_bytes()).hexdigest()
    assert refuse(url, "--checksum", f"sha256:{digest}") == (
        f"{url}: the resource changed during the transfer, so it cannot resume at byte {half}"
    )


def test_source_changing_before_its_runs_are_read_fails_clearly(refuse, images, faulty):
    url = faulty.add("disk", images.get("raw"), changing=True)
    assert refuse(url) == (
        f"{url}: the resource changed during the transfer, so it cannot be read at byte 0"
    )


def test_content_length_beyond_the_body_is_a_truncated_stream(refuse, images, faulty):
    url = faulty.add("disk", images.get("raw", "gzip"), length_delta=4096, drops=0)
    error = refuse(url)
    size = images.get("raw", "gzip").stat().st_size
    assert error == (
        f"{url}: the body ended at byte {size}, short of its declared length {size + 4096} "
        "(truncated)"
    )


def test_content_length_short_of_the_body_fails_the_checksum(refuse, images, faulty):
    source = images.get("raw")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    url = faulty.add("disk", source, length_delta=-4096)
    error = refuse(url, "--checksum", f"sha256:{digest}")
    assert error.startswith(f"{url}: sha256 checksum mismatch: expected {digest}, got ")


def test_content_length_short_of_a_compressed_body_is_a_truncated_stream(refuse, images, faulty):
    url = faulty.add("disk", images.get("qcow2", "bzip2"), length_delta=-4096)
    assert refuse(url) == "the bzip2 stream ends in the middle (truncated)"


def test_slow_trickle_still_imports_exactly(diskferry, images, faulty, tmp_path):
    source = images.get("raw", "zstd")
    url = faulty.add("disk", source, piece=32 * 1024, trickle=0.005)
    out = imported(diskferry, url, tmp_path / "disk.raw")
    assert images.same(images.reference, tmp_path / "disk.raw")
    assert out["bytesRead"] == source.stat().st_size
    assert out["resumes"] == 0


@pytest.mark.parametrize(("status", "text"), [(404, "Not Found"), (500, "Internal Server Error")])
def test_http_error_status_is_refused_with_the_status(refuse, faulty, status, text):
    url = faulty.add("disk", status=status)
    assert refuse(url) == f"{url}: server answered HTTP {status} {text}: broken on purpose"


def test_redirect_loop_is_refused(refuse, faulty):
    url = faulty.add("loop", redirect="/loop")
    assert refuse(url) == f"{url}: too many redirects"


def test_query_string_stays_out_of_messages(refuse, faulty):
    url = faulty.add("secret", status=403)
    error = refuse(f"{url}?token=hunter2")
    assert "hunter2" not in error
    assert error == f"{url}: server answered HTTP 403 Forbidden: broken on purpose"


def test_https_with_the_ca_bundle(diskferry, images, faulty_tls, tls, tmp_path):
    url = faulty_tls.add("disk", images.get("qcow2", "xz"))
    imported(diskferry, url, tmp_path / "disk.raw", "--ca-bundle", tls.ca)
    assert images.same(images.reference, tmp_path / "disk.raw")


def test_https_without_the_ca_bundle_fails_verification(refuse, images, faulty_tls):
    url = faulty_tls.add("disk", images.get("raw"))
    error = refuse(url)
    assert error.startswith(f"{url}: TLS verification failed: ")
    assert "CERTIFICATE_VERIFY_FAILED" in error


def test_headers_reach_the_server(diskferry, images, faulty, tmp_path):
    url = faulty.add("disk", images.get("raw", "gzip"))
    options = ["--header", "Authorization: Bearer abc", "--header", "X-Trace: 42"]
    imported(diskferry, url, tmp_path / "disk.raw", *options)
    seen = faulty.seen("disk")
    assert seen
    assert all(h["Authorization"] == "Bearer abc" and h["X-Trace"] == "42" for h in seen)


def test_busy_server_is_asked_again(diskferry, images, faulty, tmp_path):
    url = faulty.add("disk", images.get("raw", "gzip"), status=503, statuses=2)
    out = imported(diskferry, url, tmp_path / "disk.raw")
    assert images.same(images.reference, tmp_path / "disk.raw")
    assert len(faulty.seen("disk")) == 3
    assert out["resumes"] == 0


def test_headers_from_a_file(images, faulty, tmp_path):
    secret = tmp_path / "headers"
    secret.write_text("Authorization: Bearer from-a-file\nX-Empty:\n\nnot a header\n")
    url = faulty.add("disk", images.get("qcow2", "gzip"))
    job = ImportJob(source=url, target=str(tmp_path / "disk.raw"), headersFile=str(secret))
    run_import(job, Progress())
    assert images.same(images.reference, tmp_path / "disk.raw")
    seen = faulty.seen("disk")[0]
    assert seen["Authorization"] == "Bearer from-a-file"
    assert seen["X-Empty"] == ""
