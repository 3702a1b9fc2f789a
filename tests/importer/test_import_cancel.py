"""A cancelled import leaves the target as it was and removes what it made."""

from __future__ import annotations

import threading

import pytest

from diskferry.base.errors import CancelledError
from diskferry.disk.progress import Progress
from diskferry.importer.engine import run_import
from diskferry.importer.job import ImportJob, ImportPhase

OLD = b"the old disk\n" * 1000


class CancelOnPhase(Progress):
    """Sets `cancel` when the import enters `phase`."""

    def __init__(self, phase: str, cancel: threading.Event) -> None:
        super().__init__()
        self._when = phase
        self._cancel = cancel

    def set_phase(self, phase: str) -> None:
        super().set_phase(phase)
        if phase == self._when:
            self._cancel.set()


def test_cancel_while_streaming(images, faulty, tmp_path):
    url = faulty.add("disk", images.get("raw", "gzip"), piece=16 * 1024, trickle=0.01)
    target = tmp_path / "disk.raw"
    target.write_bytes(OLD)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    with pytest.raises(CancelledError):
        run_import(ImportJob(source=url, target=str(target), force=True), Progress(), cancel)
    assert target.read_bytes() == OLD
    assert images.leftovers(tmp_path) == []


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_cancel_while_converting(images, tmp_path, compression):
    target = tmp_path / "disk.raw"
    target.write_bytes(OLD)
    cancel = threading.Event()
    job = ImportJob(source=str(images.get("vhdx", compression)), target=str(target), force=True)
    with pytest.raises(CancelledError):
        run_import(job, CancelOnPhase(ImportPhase.CONVERTING, cancel), cancel)
    assert target.read_bytes() == OLD
    assert images.leftovers(tmp_path) == []
