"""A raw image over HTTP whose server accepts Range is read as several runs at once."""

from __future__ import annotations

import hashlib

import pytest

from diskferry.disk.http import TruncatedError
from diskferry.disk.http_volume import HttpVolume
from diskferry.disk.progress import Progress
from diskferry.importer.engine import run_import
from diskferry.importer.job import ImportJob

RUN = 4 << 20


@pytest.fixture
def small_runs(monkeypatch):
    """Runs of RUN bytes: a 32 MiB disk is eight runs, several copying at once."""
    monkeypatch.setattr(HttpVolume, "run_size", RUN)


def run_ranges(faulty) -> list[str]:
    """The Range headers of the GET requests after the first, which sniffs the image."""
    seen = faulty.seen("disk")
    assert seen[0].get("Range") is None
    return [h.get("Range") for h in seen[1:]]


def whole_runs(size: int) -> set[str]:
    return {f"bytes={at}-{min(at + RUN, size) - 1}" for at in range(0, size, RUN)}


def test_runs_are_read_on_several_connections(small_runs, images, faulty, tmp_path):
    # each run trickles, so the runs of the threads overlap
    url = faulty.add("disk", images.get("raw"), piece=1 << 20, trickle=0.01)
    target = tmp_path / "disk.raw"
    progress = Progress()
    result = run_import(ImportJob(source=url, target=str(target)), progress)
    assert target.read_bytes() == images.reference.read_bytes()
    assert images.allocated(target) <= images.data_bytes + 512 * 1024
    ranges = run_ranges(faulty)
    assert sorted(ranges) == sorted(whole_runs(images.disk_size))
    assert len(faulty.connections("disk")) >= 3  # the sniffing one and two for the runs
    assert result.bytes_read == images.disk_size
    assert result.resumes == 0
    assert progress.done == progress.total == images.disk_size
    assert images.leftovers(tmp_path) == []


# runs of a resource that names no version (ETag, Last-Modified) could mix two versions of it
@pytest.mark.parametrize("knobs", [{"ranges": False}, {"validator": False}], ids=str)
def test_server_without_range_or_version_is_streamed(small_runs, images, faulty, tmp_path, knobs):
    url = faulty.add("disk", images.get("raw"), **knobs)
    target = tmp_path / "disk.raw"
    result = run_import(ImportJob(source=url, target=str(target)), Progress())
    assert target.read_bytes() == images.reference.read_bytes()
    assert images.allocated(target) <= images.data_bytes + 512 * 1024
    assert [h.get("Range") for h in faulty.seen("disk")] == [None]
    assert result.bytes_read == images.disk_size


def test_a_checksum_is_verified_over_the_stream(small_runs, images, faulty, tmp_path):
    source = images.get("raw")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    url = faulty.add("disk", source)
    target = tmp_path / "disk.raw"
    job = ImportJob(source=url, target=str(target), checksum=f"sha256:{digest}")
    result = run_import(job, Progress())
    assert result.checksum == f"sha256:{digest}"
    assert target.read_bytes() == source.read_bytes()
    assert [h.get("Range") for h in faulty.seen("disk")] == [None]


def test_a_dropped_run_resumes_where_it_broke(small_runs, images, faulty, tmp_path):
    cut = (1 << 20) + 123
    # the first drop falls on the sniffing request, which is closed before it
    url = faulty.add("disk", images.get("raw"), drop_after=cut, drops=2)
    target = tmp_path / "disk.raw"
    result = run_import(ImportJob(source=url, target=str(target)), Progress())
    assert target.read_bytes() == images.reference.read_bytes()
    assert result.resumes == 1
    ranges = run_ranges(faulty)
    resumed = [r for r in ranges if r not in whole_runs(images.disk_size)]
    assert len(resumed) == 1
    first, _, last = resumed[0].removeprefix("bytes=").partition("-")
    assert int(first) % RUN == cut
    assert int(last) == min(int(first) - cut + RUN, images.disk_size) - 1
    assert len(ranges) == len(whole_runs(images.disk_size)) + 1


def test_runs_that_keep_breaking_fail_once_and_leave_no_target(
    small_runs, images, faulty, tmp_path
):
    # the sniffing request is answered whole, then every answer breaks before its first byte
    url = faulty.add("disk", images.get("raw"), drop_after=0, drops=1000, drops_from=1)
    target = tmp_path / "disk.raw"
    job = ImportJob(source=url, target=str(target), retries=1)
    with pytest.raises(TruncatedError, match="did not resume after 1 retries"):
        run_import(job, Progress())
    assert not target.exists()
    assert images.leftovers(tmp_path) == []
