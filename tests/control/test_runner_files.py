"""LocalRunner's job files: read back, and replaced at once while the worker runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from control_support import wait_until

from diskferry.control.runtime.runner.base import JobFile
from diskferry.control.runtime.runner.local import JobStartError, LocalRunner
from diskferry.importer import ImportJob


def test_a_jobs_files_are_read_and_replaced(tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path / "data")
    source = tmp_path / "missing.raw"
    job = ImportJob(source=str(source), target=str(tmp_path / "disk.raw"))
    runner.start("job-f", job, [JobFile("note.txt", b"first")])
    assert runner.read_file("job-f", "note.txt") == b"first"
    runner.write_file("job-f", "note.txt", b"second")
    runner.write_file("job-f", "new.txt", b"made")
    directory = tmp_path / "data/jobs/job-f"
    assert (directory / "note.txt").read_bytes() == b"second"
    assert (directory / "new.txt").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in directory.glob(".*")) == []
    assert runner.read_file("job-f", "absent.txt") is None
    assert runner.read_file("no-such-job", "note.txt") is None
    with pytest.raises(JobStartError, match="no job no-such-job"):
        runner.write_file("no-such-job", "note.txt", b"x")
    for name in ("job.json", "state.json", "../escape", ".hidden"):
        with pytest.raises(JobStartError, match="not a usable name"):
            runner.write_file("job-f", name, b"x")
        with pytest.raises(JobStartError, match="not a usable name"):
            runner.read_file("job-f", name)
    wait_until(lambda: runner.purge("job-f", keep_scratch=False))
    assert runner.read_file("job-f", "note.txt") is None
