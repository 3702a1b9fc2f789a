"""Progress of an import: one percentage over both phases, ending with all bytes done."""

from __future__ import annotations

import hashlib

import pytest

from diskferry.disk.progress import Progress
from diskferry.importer.engine import run_import
from diskferry.importer.job import ImportJob, ImportPhase


class PhaseLog(Progress):
    """Remembers the percent at which each phase began, and the bytes counted while no total
    was known (which a status would show as done bytes of an unknown whole)."""

    def __init__(self) -> None:
        super().__init__()
        self.phases: list[tuple[str, float]] = []
        self.counted_before_total = 0

    def set_phase(self, phase: str) -> None:
        super().set_phase(phase)
        self.phases.append((phase, self.percent))

    def add(self, n: int) -> None:
        super().add(n)
        if not self.total:
            self.counted_before_total += n


@pytest.mark.parametrize(
    ("fmt", "compression", "http"),
    [
        ("raw", None, False),
        ("raw", "gzip", False),
        ("raw", None, True),
        ("qcow2", None, False),
        ("qcow2", "zstd", False),
        ("vdi", None, True),
    ],
)
@pytest.mark.parametrize("hashed", [False, True], ids=["", "checksum"])
def test_every_byte_is_counted_once(images, nginx, tmp_path, fmt, compression, http, hashed):
    source = images.get(fmt, compression)
    where = nginx.publish(source) if http else str(source)
    checksum = f"md5:{hashlib.md5(source.read_bytes()).hexdigest()}" if hashed else None
    progress = PhaseLog()
    job = ImportJob(source=where, target=str(tmp_path / "disk.raw"), checksum=checksum)
    run_import(job, progress)
    assert progress.done == progress.total > 0
    assert progress.percent == 100.0
    assert progress.counted_before_total == 0
    assert [phase for phase, _ in progress.phases[:2]] == [
        ImportPhase.OPENING,
        ImportPhase.IMPORTING,
    ]


@pytest.mark.parametrize("compression", ["gzip", "xz"])
def test_download_and_conversion_are_halves_of_one_percentage(images, tmp_path, compression):
    progress = PhaseLog()
    job = ImportJob(source=str(images.get("qcow2", compression)), target=str(tmp_path / "d.raw"))
    run_import(job, progress)
    phases = [ImportPhase.OPENING, ImportPhase.IMPORTING, ImportPhase.CONVERTING]
    assert [phase for phase, _ in progress.phases] == phases
    assert progress.phases[2][1] == 50.0
    assert progress.done == progress.total
