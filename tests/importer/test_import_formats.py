"""Every image format under every compression, imported from a local path."""

from __future__ import annotations

import os

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
