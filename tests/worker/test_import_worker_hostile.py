"""Hostile images given to the import worker: a JSON result with the reason, one log line,
the target untouched, no temporary file left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hostile_images import (
    QCOW2_MAX_L1_ENTRIES,
    VMDK_REFUSED,
    endless_server,
    qcow2,
    qcow2_of_virtual_size,
    qcow2_with_l1_entries,
    vmdk_descriptor,
)
from worker_support import job_file, run

MiB = 1 << 20
OLD = b"the disk that must survive\n" * 1000


@pytest.fixture
def refused_by_worker(images, tmp_path: Path):
    """Run the import worker on a source that must fail; its result, all else checked."""

    def check(source: str | Path, **options: object) -> dict:
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        target = out / "target.raw"
        target.write_bytes(OLD)
        job = job_file(
            tmp_path,
            {"jobId": "hostile", "source": str(source), "target": str(target), "force": True}
            | options,
        )
        finished = run("import", job, env={**os.environ, "TMPDIR": str(tmp_path)})
        assert finished.code == 1, finished.stderr
        finished.assert_one_log_line_of_failure()
        result = finished.result
        assert (result["ok"], result["jobId"]) == (False, "hostile")
        assert target.read_bytes() == OLD
        assert images.leftovers(out) == [] and images.leftovers(tmp_path) == []
        return result

    return check


def test_a_virtual_size_of_two_to_the_63(refused_by_worker, tmp_path: Path) -> None:
    result = refused_by_worker(qcow2_of_virtual_size(tmp_path, 1 << 63, "gzip"))
    assert result["message"].startswith(f"the image's virtual size ({1 << 63} bytes) is larger")


def test_an_absurd_l1_table(refused_by_worker, tmp_path: Path) -> None:
    source = qcow2_with_l1_entries(tmp_path, QCOW2_MAX_L1_ENTRIES * 2, None)
    result = refused_by_worker(source)
    assert result["reason"] == "ImageRefused"
    assert "(Active L1 table too large)" in result["message"]


def test_a_vmdk_descriptor_naming_etc_shadow(refused_by_worker, tmp_path: Path) -> None:
    result = refused_by_worker(vmdk_descriptor(tmp_path, "# Disk DescriptorFile\n", None))
    assert (result["reason"], result["message"]) == ("ImageRefused", VMDK_REFUSED)


def test_a_gzip_that_never_ends(refused_by_worker) -> None:
    with endless_server() as serve:
        result = refused_by_worker(serve("empty-members"))
    assert result["reason"] == "BadCompression"
    assert result["message"] == (
        "the gzip stream goes on for more than 4 MiB without any data; refusing it"
    )


def test_a_decompression_bomb(refused_by_worker, images, tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.qcow2"
    bomb.write_bytes(bytes(qcow2(tmp_path, "2M")) + bytes(64 * MiB))
    result = refused_by_worker(images.compress(bomb, "zstd"))
    assert result["message"] == (
        "the decompressed image grows past its declared virtual size, 2097152 bytes; "
        "refusing it (a decompression bomb?)"
    )
