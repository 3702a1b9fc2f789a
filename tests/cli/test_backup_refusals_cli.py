"""Backup commands refuse what would store or make a wrong disk: CBT or a backup of a volume
that holds an image format, a chain reset of what nothing tracked, a half-made repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

PASSWORD = "refusals password"
MiB = 1 << 20


@pytest.fixture
def repo(diskferry, tmp_path: Path) -> Path:
    """An initialised repository, its password and cache in the CLI's environment."""
    diskferry.env.update(DISKFERRY_PASSWORD=PASSWORD, DISKFERRY_CACHE_DIR=str(tmp_path / "cache"))
    path = tmp_path / "repo"
    assert diskferry("repo", "init", "--repo", path).code == 0
    return path


def _image(path: Path, fmt: str) -> Path:
    qemu_fmt = "vpc" if fmt == "vhd" else fmt
    subprocess.run(["qemu-img", "create", "-q", "-f", qemu_fmt, path, "8M"], check=True)
    return path


@pytest.mark.parametrize("fmt", ["qcow2", "vmdk", "vdi", "vhdx", "vhd"])
def test_cbt_enable_refuses_a_volume_that_is_not_raw(diskferry, tmp_path: Path, fmt: str) -> None:
    image = _image(tmp_path / f"disk.{fmt}", fmt)
    before = image.read_bytes()
    refused = diskferry("cbt", "enable", image)
    assert refused.code == 1
    assert refused.error == (
        f"{image} is a {fmt} image, not a raw volume: CBT tracks raw volumes "
        "(convert it first: qemu-img convert -O raw)"
    )
    assert image.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [image.name]


def test_backup_refuses_an_image_format_without_cbt(diskferry, repo: Path, tmp_path: Path) -> None:
    image = _image(tmp_path / "disk.qcow2", "qcow2")
    refused = diskferry("backup", "--repo", repo, "--vm", "vm", "--disk", f"d={image}")
    assert refused.code == 1
    assert refused.error == (
        f"{image} is a qcow2 image, not a raw volume: back up a raw volume or its CBT overlay "
        "(convert it first: qemu-img convert -O raw)"
    )
    assert diskferry("snapshots", "--repo", repo, "--json").stdout.strip() == "[]"


def test_chain_reset_of_what_nothing_tracked_is_an_error(
    diskferry, repo: Path, tmp_path: Path
) -> None:
    nothing = diskferry("chain", "reset", "--repo", repo, "--vm", "nosuchvm")
    assert nothing.code == 1
    assert (
        nothing.error == "nothing is tracked for VM nosuchvm in this repository: no chain to reset"
    )
    disk = tmp_path / "d.raw"
    with open(disk, "wb") as f:
        f.truncate(4 * MiB)
    backed = diskferry("backup", "--repo", repo, "--vm", "vm", "--disk", f"d={disk}")
    assert backed.code == 0, backed.stderr
    other = diskferry("chain", "reset", "--repo", repo, "--vm", "vm", "--disk", "e")
    assert other.code == 1
    assert other.error == ("nothing is tracked for disk e of VM vm (tracked: d): no chain to reset")
    done = diskferry("chain", "reset", "--repo", repo, "--vm", "vm", "--json")
    assert done.code == 0, done.stderr


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ((), "a password is needed"),
        (("--no-encryption", "--chunk-size", "1T"), "chunk size 1099511627776 is out of range"),
    ],
)
def test_a_failed_repo_init_leaves_nothing(
    diskferry, tmp_path: Path, options: tuple[str, ...], said: str
) -> None:
    diskferry.env.pop("DISKFERRY_PASSWORD", None)
    target = tmp_path / "repo"
    failed = diskferry("repo", "init", "--repo", target, *options)
    assert failed.code == 1
    assert failed.error.startswith(said)
    assert not target.exists()
