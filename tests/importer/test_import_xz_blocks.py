"""Importing a multi-block xz image: decoded a block a thread, the same bytes, damage refused."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from diskferry.disk import xz_blocks
from diskferry.disk.decompress import DecompressError
from diskferry.disk.progress import Progress
from diskferry.importer.engine import run_import
from diskferry.importer.job import ImportJob


@pytest.fixture(scope="module")
def multi_block(images, tmp_path_factory):
    """The reference disk as xz in 1 MiB blocks, as `xz -T` writes them."""
    path = tmp_path_factory.mktemp("xz") / "disk.raw.xz"
    with open(path, "wb") as out:
        args = ["xz", "-T2", "--block-size=1MiB", "-c", str(images.reference)]
        subprocess.run(args, stdout=out, check=True)
    return path


@pytest.mark.parametrize("fmt", ["raw", "qcow2"])
def test_a_multi_block_image_imports_exactly(images, multi_block, tmp_path, monkeypatch, fmt):
    decoded = []

    def counted(stream: bytes, size: int) -> bytes:
        decoded.append(size)
        return decode(stream, size)

    decode = xz_blocks._decode_block
    monkeypatch.setattr(xz_blocks, "_decode_block", counted)
    target = tmp_path / f"disk.{fmt}"
    checksum = f"sha256:{hashlib.sha256(multi_block.read_bytes()).hexdigest()}"
    job = ImportJob(source=str(multi_block), target=str(target), format=fmt, checksum=checksum)
    progress = Progress()
    result = run_import(job, progress)
    assert images.same(images.reference, target)
    assert result.compression == "xz"
    assert sum(decoded) == images.disk_size and len(decoded) == images.disk_size >> 20
    assert progress.percent == 100.0


def test_a_damaged_block_fails_the_import_and_leaves_no_target(images, multi_block, tmp_path):
    raw = bytearray(multi_block.read_bytes())
    raw[len(raw) // 3] ^= 0xFF
    source = tmp_path / "damaged.raw.xz"
    source.write_bytes(raw)
    target = tmp_path / "disk.raw"
    with pytest.raises(DecompressError, match="the xz stream is corrupt"):
        run_import(ImportJob(source=str(source), target=str(target)), Progress())
    assert not target.exists()
    assert images.leftovers(tmp_path) == []
