"""Images whose last bytes are zeros: nothing is written there, yet the size is exact."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MiB = 1 << 20


@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_a_disk_ending_in_a_hole_imports_whole(diskferry, images, tmp_path, compression) -> None:
    disk = tmp_path / "tail-hole.raw"
    with open(disk, "wb") as f:
        f.truncate(24 * MiB)
        f.seek(3 * MiB)
        f.write(os.urandom(MiB))
    source = images.compress(disk, compression) if compression else disk
    out = tmp_path / "out.raw"
    result = diskferry("import", source, out, "--no-progress")
    assert result.code == 0, result.stderr
    assert out.stat().st_size == 24 * MiB
    assert images.same(disk, out)
    assert images.allocated(out) <= 2 * MiB
    assert images.leftovers(tmp_path) == []


def test_http_disk_ending_in_a_hole(diskferry, images, nginx, tmp_path: Path) -> None:
    disk = tmp_path / "tail-hole-http.raw"
    with open(disk, "wb") as f:
        f.truncate(8 * MiB)
        f.write(os.urandom(4096))
    url = nginx.publish(images.compress(disk, "gzip"))
    out = tmp_path / "out.raw"
    result = diskferry("import", url, out, "--no-progress")
    assert result.code == 0, result.stderr
    assert out.stat().st_size == 8 * MiB
    assert images.same(disk, out)
