"""A conversion by qemu-img writes its target around the page cache (`-t none`) for the
formats where that is faster, where the target takes O_DIRECT, and exactly either way."""

from __future__ import annotations

import itertools
import os
import subprocess

import pytest

from diskferry.disk.progress import Progress
from diskferry.importer import engine
from diskferry.importer.engine import run_import
from diskferry.importer.job import ImportJob
from diskferry.qemu import img


@pytest.fixture
def commands(monkeypatch) -> list[list[str]]:
    """Every qemu-img command line run from now on."""
    seen: list[list[str]] = []
    real = img.run

    def spy(args, what, **kwargs):
        seen.append(list(args))
        return real(args, what, **kwargs)

    monkeypatch.setattr(img, "run", spy)
    return seen


def _takes_direct_io(folder) -> bool:
    """Whether dd can write a file in `folder` with O_DIRECT."""
    probe = folder / "probe"
    args = ["dd", "if=/dev/zero", f"of={probe}", "bs=4096", "count=1", "oflag=direct"]
    done = subprocess.run(args, capture_output=True, check=False)
    probe.unlink(missing_ok=True)
    return done.returncode == 0


def _convert(commands: list[list[str]]) -> list[str]:
    (convert,) = [c for c in commands if c[0] == "convert"]
    return convert


def _writes_direct(convert: list[str]) -> bool:
    return any(a == "-t" and b == "none" for a, b in itertools.pairwise(convert))


@pytest.mark.parametrize("fmt", ["qcow2", "vhdx", "vmdk", "vdi", "vhd"])
@pytest.mark.parametrize("out", ["raw", "qcow2"])
def test_only_qcow2_and_vhdx_convert_around_the_page_cache(images, tmp_path, commands, fmt, out):
    target = tmp_path / "disk.img"
    job = ImportJob(source=str(images.get(fmt)), target=str(target), format=out)
    run_import(job, Progress())
    assert _writes_direct(_convert(commands)) == (
        fmt in ("qcow2", "vhdx") and _takes_direct_io(tmp_path)
    )
    assert images.same(images.reference, target)
    assert images.leftovers(tmp_path) == []


def test_a_target_without_o_direct_is_written_through_the_page_cache(
    images, tmp_path, commands, monkeypatch
):
    asked: list[str] = []

    def refuses(path: str) -> bool:
        asked.append(path)
        return False

    monkeypatch.setattr(engine, "takes_direct_io", refuses)
    target = tmp_path / "disk.raw"
    run_import(ImportJob(source=str(images.get("qcow2")), target=str(target)), Progress())
    convert = _convert(commands)
    assert not _writes_direct(convert)
    assert asked == [convert[-1]]  # the prime file that qemu-img writes
    assert images.same(images.reference, target)


def test_an_image_of_no_whole_pages_converts_exactly_around_the_page_cache(tmp_path, commands):
    # 1 MiB and 3 sectors: the last write cannot be whole pages of the target
    size = (1 << 20) + 3 * 512
    source = tmp_path / "odd.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(source), str(size)], check=True)
    writes = ["write -P 0x5a 0 4096", "write -P 0xa5 1048576 1536", "write -P 0x33 700000 512"]
    for write in writes:
        subprocess.run(["qemu-io", "-f", "qcow2", "-c", write, str(source)], check=True)
    target = tmp_path / "odd.raw"
    run_import(ImportJob(source=str(source), target=str(target)), Progress())
    assert _writes_direct(_convert(commands)) == _takes_direct_io(tmp_path)
    data = target.read_bytes()
    assert len(data) == size
    assert data[:4096] == b"\x5a" * 4096
    assert data[700000:700512] == b"\x33" * 512
    assert data[-1536:] == b"\xa5" * 1536
    assert data.count(0) == size - 4096 - 512 - 1536
    assert set(os.listdir(tmp_path)) == {"odd.qcow2", "odd.raw"}
