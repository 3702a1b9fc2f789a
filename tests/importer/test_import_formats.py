"""Every image format under every compression, imported from a local path."""

from __future__ import annotations

import os
import subprocess

import pytest

from diskferry.disk.formats import COMPRESSIONS, FORMATS
from diskferry.disk.progress import Progress
from diskferry.importer.engine import run_import
from diskferry.importer.job import ImportJob


@pytest.mark.parametrize("compression", (None, *COMPRESSIONS), ids=lambda c: c or "plain")
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_and_compression_imports_exactly(images, tmp_path, fmt, compression):
    source = images.get(fmt, compression)
    target = tmp_path / "disk.raw"
    progress = Progress()
    result = run_import(ImportJob(source=str(source), target=str(target)), progress)
    assert images.same(images.expected(fmt), target)
    assert result.source_format == fmt
    assert result.compression == compression
    assert result.virtual_size == os.path.getsize(target) >= images.disk_size
    # the data rounded to pages at its edges, and some room for the filesystem
    assert images.allocated(target) <= images.data_bytes + 512 * 1024
    assert progress.percent == 100.0
    assert images.leftovers(tmp_path) == []


@pytest.fixture(scope="module")
def fixed_vhd(images, tmp_path_factory):
    path = tmp_path_factory.mktemp("vhd") / "fixed.vhd"
    args = ["-f", "raw", "-O", "vpc", "-o", "subformat=fixed", str(images.reference), str(path)]
    subprocess.run(["qemu-img", "convert", *args], check=True)
    return path


@pytest.mark.parametrize("fmt", ["raw", "qcow2"])
@pytest.mark.parametrize("how", ["file", "gzip", "http"])
def test_fixed_vhd_is_told_from_raw_by_its_footer(images, nginx, fixed_vhd, tmp_path, how, fmt):
    # a fixed VHD starts like raw; only the footer after the disk says what it is
    source = str(fixed_vhd)
    if how == "gzip":
        source = str(images.compress(fixed_vhd, "gzip", tmp_path / "fixed.vhd.gz"))
    elif how == "http":
        source = nginx.publish(fixed_vhd, f"fixed-{tmp_path.name}.vhd")
    target = tmp_path / "disk.img"
    result = run_import(ImportJob(source=source, target=str(target), format=fmt), Progress())
    disk = os.path.getsize(fixed_vhd) - 512
    assert result.source_format == "vhd"
    assert result.virtual_size == disk
    assert images.same(images.reference, target)
    if fmt == "raw":
        assert os.path.getsize(target) == disk
        assert images.allocated(target) <= images.data_bytes + 512 * 1024


@pytest.mark.parametrize(
    ("fmt", "options"),
    [
        ("vmdk", ["-o", "subformat=streamOptimized"]),
        ("vhdx", ["-o", "subformat=fixed"]),
        ("vdi", ["-o", "static=on"]),
        ("qcow2", ["-c"]),
        ("qcow2", ["-o", "compat=0.10"]),
    ],
)
def test_other_layouts_of_a_format(images, tmp_path, fmt, options):
    source = tmp_path / f"layout.{fmt}"
    args = ["-f", "raw", "-O", fmt, *options, str(images.reference), str(source)]
    subprocess.run(["qemu-img", "convert", *args], check=True)
    target = tmp_path / "disk.raw"
    result = run_import(ImportJob(source=str(source), target=str(target)), Progress())
    assert result.source_format == fmt
    assert images.same(images.reference, target)
