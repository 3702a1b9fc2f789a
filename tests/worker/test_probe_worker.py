"""The probe worker: the format and virtual size of a source read from its head (a compressed
one through its decompressor), and a refusal that says why where the head does not tell the
size."""

from __future__ import annotations

from pathlib import Path

from worker_support import job_file, run


def test_a_probe_tells_the_size_from_the_head_of_a_compressed_image(
    tmp_path: Path, nginx, images
) -> None:
    url = nginx.publish(images.get("qcow2", "gzip"), "probe.qcow2.gz")
    job = {"kind": "probe", "jobId": "vi-probe-1", "source": url}
    finished = run("import", job_file(tmp_path, job))
    assert finished.code == 0, finished.stderr
    result = finished.result
    assert (result["format"], result["compression"]) == ("qcow2", "gzip")
    assert result["virtualSize"] == images.disk_size


def test_a_probe_whose_source_does_not_tell_its_size_says_why(
    tmp_path: Path, nginx, images
) -> None:
    url = nginx.publish(images.get("raw", "gzip"), "probe.raw.gz")
    job = {"kind": "probe", "jobId": "vi-probe-2", "source": url}
    finished = run("import", job_file(tmp_path, job))
    assert finished.code == 1
    assert finished.result["reason"] == "SizeUnknown"
    assert "gzip-compressed raw" in finished.result["message"]
    assert "persistentVolumeClaim.size" in finished.result["message"]
