"""`diskferry export download` replaces an existing target only with --force, as import and
restore do, and reports a bad source as such whether or not the target exists."""

from __future__ import annotations

import os
from pathlib import Path

OLD = b"the target as it was\n" * 4096
MiB = 1 << 20


def test_an_existing_target_is_replaced_only_with_force(
    diskferry, images, faulty, tmp_path: Path
) -> None:
    disk = tmp_path / "served.img"
    disk.write_bytes(os.urandom(2 * MiB))
    url = faulty.add("disk.img", disk)
    out = tmp_path / "out"
    out.mkdir()
    target = out / "disk.img"
    target.write_bytes(OLD)
    refused = diskferry("export", "download", url, target, "--no-progress")
    assert refused.code == 1
    assert refused.error == f"{target} exists: give --force to replace it"
    assert target.read_bytes() == OLD and images.leftovers(out) == []
    forced = diskferry("export", "download", url, target, "--no-progress", "--force")
    assert forced.code == 0, forced.stderr
    assert target.read_bytes() == disk.read_bytes()


def test_a_bad_source_is_reported_whether_or_not_the_target_exists(
    diskferry, faulty, tmp_path: Path
) -> None:
    url = f"{faulty.url}/missing.img"
    existing = tmp_path / "existing.img"
    existing.write_bytes(OLD)
    said = []
    for target in (existing, tmp_path / "new.img"):
        result = diskferry("export", "download", url, target, "--no-progress")
        assert result.code == 1
        said.append(result.error)
    assert said[0] == said[1] and said[0].startswith(f"{url}: ")
    assert existing.read_bytes() == OLD and not (tmp_path / "new.img").exists()
