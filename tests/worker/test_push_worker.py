"""The push worker: a source imported and stored as a containerDisk in an OCI layout, in the
source's format when raw or qcow2 and as qcow2 otherwise, with its sizes in the result line."""

from __future__ import annotations

from pathlib import Path

import pytest
from worker_support import job_file, start

from diskferry.disk.progress import Progress
from diskferry.importer.engine import run_import
from diskferry.importer.job import ImportJob


@pytest.mark.parametrize(("fmt", "stored"), [("qcow2", "qcow2"), ("raw", "raw"), ("vdi", "qcow2")])
def test_a_push_job_stores_the_source_in_a_layout(tmp_path: Path, images, fmt, stored) -> None:
    reference = f"oci:{tmp_path / 'store' / 'vi' / 'one'}:uid-1"
    source = str(images.get(fmt))
    job = {"kind": "push", "jobId": "push-1", "source": source, "reference": reference}
    finished = start("import", job_file(tmp_path, job)).finish()
    assert finished.code == 0, finished.stderr
    result = finished.result
    assert (result["ok"], result["jobId"], result["format"]) == (True, "push-1", stored)
    assert (result["sourceFormat"], result["unpackedSize"]) == (fmt, images.disk_size)
    assert result["storedSize"] > 0
    back = tmp_path / "back.raw"
    run_import(ImportJob(source=reference, target=str(back)), Progress())
    assert images.same(back, images.reference)


def test_a_push_of_a_missing_source_fails_with_its_reason(tmp_path: Path) -> None:
    reference = f"oci:{tmp_path / 'store'}:t"
    source = str(tmp_path / "none")
    job = {"kind": "push", "jobId": "push-2", "source": source, "reference": reference}
    finished = start("import", job_file(tmp_path, job)).finish()
    assert finished.code != 0
    assert finished.result["ok"] is False and finished.result["reason"]
