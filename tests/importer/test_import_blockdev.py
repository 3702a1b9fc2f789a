"""Imports into a block device (a loop device): written in place, refused when too small."""

from __future__ import annotations

import json
import os

import pytest


def fill(device: str, pattern: bytes) -> bytes:
    """Write `pattern` over the whole device; what it then holds."""
    with open(device, "r+b", buffering=0) as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        data = pattern * (size // len(pattern))
        f.write(data)
        os.fsync(f.fileno())
    return data


def content(device: str) -> bytes:
    with open(device, "rb", buffering=0) as f:
        return f.read()


@pytest.mark.parametrize(("fmt", "compression"), [("raw", "gzip"), ("qcow2", None), ("raw", None)])
def test_import_into_a_block_device(diskferry, images, loop_device, fmt, compression):
    device = loop_device(images.disk_size)
    fill(device, b"\xa5" * 4096)
    result = diskferry("import", images.get(fmt, compression), device, "--json", "--force")
    assert result.code == 0, result.stderr
    assert f"diskferry: this import overwrites the block device {device}" in result.stderr
    assert content(device) == images.reference.read_bytes()
    out = json.loads(result.stdout)
    assert out["virtualSize"] == images.disk_size
    assert out["format"] == "raw"


@pytest.mark.parametrize(("fmt", "compression"), [("raw", "zstd"), ("qcow2", None), ("vdi", "xz")])
def test_device_larger_than_the_image_reads_zeros_past_it(
    diskferry, images, loop_device, fmt, compression
):
    device = loop_device(images.disk_size + (16 << 20))
    fill(device, b"\x5a" * 4096)
    result = diskferry(
        "import", images.get(fmt, compression), device, "--size", "40M", "--json", "--force"
    )
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["virtualSize"] == 40 << 20
    data = content(device)
    assert data[: images.disk_size] == images.reference.read_bytes()
    assert data[images.disk_size :] == bytes(16 << 20)


@pytest.mark.parametrize("fmt", ["raw", "qcow2"])
def test_too_small_device_is_refused_before_any_write(diskferry, images, loop_device, fmt):
    device = loop_device(images.disk_size // 2)
    before = fill(device, b"keep")
    result = diskferry("import", images.get(fmt), device, "--force")
    assert result.code == 1
    assert result.error == (
        f"the image's virtual size ({images.disk_size} bytes) is larger than the size of "
        f"the block device {device} ({images.disk_size // 2} bytes)"
    )
    assert content(device) == before
    assert images.leftovers(diskferry.env["TMPDIR"]) == []


def test_stream_larger_than_the_device_is_refused(diskferry, images, loop_device):
    device = loop_device(images.disk_size // 2)
    result = diskferry("import", images.get("raw", "xz"), device, "--force")
    assert result.code == 1
    assert result.error == (
        f"the decompressed image grows past the size of the block device {device}, "
        f"{images.disk_size // 2} bytes; refusing it (a decompression bomb?); "
        f"the block device {device} is partly written"
    )


def test_failure_reports_the_device_partly_written(diskferry, images, loop_device, tmp_path):
    device = loop_device(images.disk_size)
    whole = images.get("raw", "gzip").read_bytes()
    cut = tmp_path / "cut.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    result = diskferry("import", cut, device, "--force")
    assert result.code == 1
    assert result.error == (
        f"the gzip stream ends in the middle (truncated); the block device {device} is partly "
        "written"
    )


def test_block_device_takes_only_raw(diskferry, images, loop_device):
    device = loop_device(images.disk_size)
    before = fill(device, b"same")
    result = diskferry("import", images.get("raw"), device, "--format", "qcow2", "--force")
    assert result.code == 1
    assert result.error == f"{device} is a block device: it can only hold a raw image"
    assert content(device) == before
