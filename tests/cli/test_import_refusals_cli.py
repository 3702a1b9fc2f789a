"""`diskferry import` refuses what would damage a disk: a target that exists without --force,
a target that is the source, an HTML page or a partial-sector raw source, an unknown scheme."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

OLD = b"the target as it was\n" * 4096


@pytest.fixture
def existing(tmp_path: Path) -> Path:
    """A target file that holds something."""
    out = tmp_path / "out"
    out.mkdir()
    target = out / "disk.raw"
    target.write_bytes(OLD)
    return target


def test_an_existing_target_is_replaced_only_with_force(diskferry, images, existing: Path) -> None:
    refused = diskferry("import", images.get("qcow2"), existing, "--no-progress")
    assert refused.code == 1
    assert refused.error == f"{existing} exists: give --force to replace it"
    assert existing.read_bytes() == OLD
    assert images.leftovers(existing.parent) == []
    forced = diskferry("import", images.get("qcow2"), existing, "--no-progress", "--force")
    assert forced.code == 0, forced.stderr
    assert images.same(images.reference, existing)


def test_a_bad_source_is_reported_whether_or_not_the_target_exists(
    diskferry, existing: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.img"
    for target in (existing, tmp_path / "new.raw"):
        result = diskferry("import", missing, target, "--no-progress")
        assert result.code == 1
        assert result.error == f"cannot open {missing}: No such file or directory"
    assert existing.read_bytes() == OLD
    assert not (tmp_path / "new.raw").exists()


def _overlay(volume: Path) -> Path:
    enabled = subprocess.run(
        [Path(sys.executable).with_name("diskferry"), "cbt", "enable", volume],
        capture_output=True,
        text=True,
    )
    assert enabled.returncode == 0, enabled.stderr
    return Path(f"{volume}.cbt.qcow2")


def test_the_source_as_target_is_refused_even_with_force(diskferry, tmp_path: Path) -> None:
    volume = tmp_path / "vm.raw"
    with open(volume, "wb") as f:
        f.truncate(4 << 20)
        f.write(b"the guest's data")
    before = volume.read_bytes()
    link = tmp_path / "link.raw"
    link.symlink_to(volume)
    overlay = _overlay(volume)
    for source, target in ((volume, volume), (link, volume), (volume, link), (volume, overlay)):
        result = diskferry("import", source, target, "--no-progress", "--force")
        assert result.code == 1, (source, target)
        assert result.error == (
            f"the target {target} is the source {source}: refusing to overwrite it"
        )
    assert volume.read_bytes() == before
    assert subprocess.run(["qemu-img", "check", "-q", overlay]).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.raw", "vm.raw", overlay.name]


def test_an_html_page_is_refused_unless_told(diskferry, nginx, tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text("<html><body>" + "x" * 1012 + "</body></html>\n")
    url = nginx.publish(page, "page.html")
    target = tmp_path / "disk.raw"
    refused = diskferry("import", url, target, "--no-progress")
    assert refused.code == 1
    assert refused.error == (
        f"{url} is an HTML page (Content-Type: text/html), not a disk image; refusing it "
        "(give --no-content-check to import it all the same)"
    )
    assert not target.exists()
    taken = diskferry("import", url, target, "--no-progress", "--no-content-check")
    assert taken.code == 0, taken.stderr
    assert target.read_bytes() == page.read_bytes()


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_raw_source_of_partial_sectors_is_refused_unless_told(
    diskferry, images, tmp_path: Path, compression: str | None
) -> None:
    source = tmp_path / "notes.txt"
    source.write_bytes(b"not a disk\n" * 1000)
    if compression:
        source = images.compress(source, compression)
    target = tmp_path / "disk.raw"
    refused = diskferry("import", source, target, "--no-progress")
    assert refused.code == 1
    assert refused.error == (
        f"{source} is 11000 bytes, not a multiple of 512: not a raw disk image; refusing it "
        "(give --no-content-check to import it all the same)"
    )
    assert not target.exists() and images.leftovers(tmp_path) == []
    taken = diskferry("import", source, target, "--no-progress", "--no-content-check")
    assert taken.code == 0, taken.stderr
    assert target.read_bytes() == b"not a disk\n" * 1000


@pytest.mark.parametrize("scheme", ["ftp", "sftp", "s3"])
def test_an_unsupported_scheme_is_named(diskferry, tmp_path: Path, scheme: str) -> None:
    result = diskferry("import", f"{scheme}://host/disk.img", tmp_path / "d.raw", "--no-progress")
    assert result.code == 1
    assert result.error.startswith(f"unsupported source scheme {scheme}: ")
