"""The one job lifecycle over the real import and backup workers: polled into an outcome
(running with its progress, succeeded with its typed result, failed with reason and message,
lost), settled (a failed job's scratch kept, its log tail emitted tagged), and started again
once settled; chores run to their end one call at a time, and work handed to a job started
before it was known."""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

from control_support import wait_until
from pydantic import BaseModel

from diskferry.backup import Chores, ChoresJob, ChoresResult, MetadataRead
from diskferry.control.runtime.runner.base import JobFile
from diskferry.control.runtime.runner.jobs import (
    BAD_RESULT,
    WORKER_LOST,
    Failed,
    Jobs,
    Running,
    Succeeded,
)
from diskferry.control.runtime.runner.local import LocalRunner
from diskferry.export import ServeResult
from diskferry.importer import ImportJob, ImportResult

MiB = 1 << 20


def _ended(jobs: Jobs, job_id: str, result: type[BaseModel] = ImportResult):
    return wait_until(lambda: (o := jobs.poll(job_id, result)) and not isinstance(o, Running) and o)


def _progress(jobs: Jobs, job_id: str) -> Running:
    return wait_until(
        lambda: isinstance(o := jobs.poll(job_id, ImportResult), Running) and o.progress and o
    )


def test_a_job_runs_to_its_typed_result_and_is_settled_without_a_trace(
    faulty, tmp_path: Path, caplog
) -> None:
    source = tmp_path / "source.raw"
    source.write_bytes(os.urandom(4 * MiB))
    url = faulty.add("slow.img", source, piece=128 * 1024, trickle=0.05)
    jobs = Jobs(LocalRunner(tmp_path / "data"))
    assert jobs.poll("job-1", ImportResult) is None
    jobs.start("job-1", ImportJob(source=url, target=str(tmp_path / "disk.raw")))
    assert _progress(jobs, "job-1").progress["jobId"] == "job-1"
    done = _ended(jobs, "job-1")
    assert isinstance(done, Succeeded) and isinstance(done.result, ImportResult)
    assert done.result.virtual_size == 4 * MiB
    with caplog.at_level(logging.INFO, logger="diskferry.control"):
        assert jobs.settle("job-1", "VirtualDisk default/vd", keep=False)
    assert any(r.getMessage().startswith("VirtualDisk default/vd: ") for r in caplog.records)
    assert jobs.poll("job-1", ImportResult) is None
    assert not (tmp_path / "data/jobs/job-1").exists()


def test_a_failed_job_keeps_its_scratch_until_it_is_started_again(tmp_path: Path) -> None:
    jobs = Jobs(LocalRunner(tmp_path / "data"))
    missing = ImportJob(source=str(tmp_path / "missing.raw"), target=str(tmp_path / "t.raw"))
    jobs.start("job-2", missing)
    failed = _ended(jobs, "job-2")
    assert isinstance(failed, Failed) and not failed.lost and not failed.kept
    assert failed.reason == "SourceUnavailable" and "missing.raw" in failed.message
    assert jobs.settle("job-2", "tag", keep=True)
    kept = jobs.poll("job-2", ImportResult)
    assert isinstance(kept, Failed) and kept.kept and kept.reason == "SourceUnavailable"
    assert (tmp_path / "data/jobs/failed/job-2/stderr").exists()

    (tmp_path / "missing.raw").write_bytes(b"\0" * MiB)
    assert jobs.restart("job-2", missing)
    assert not (tmp_path / "data/jobs/failed/job-2").exists()
    assert isinstance(_ended(jobs, "job-2"), Succeeded)


def test_a_worker_killed_outright_is_lost(faulty, tmp_path: Path) -> None:
    source = tmp_path / "source.raw"
    source.write_bytes(os.urandom(8 * MiB))
    url = faulty.add("slower.img", source, piece=128 * 1024, trickle=0.05)
    jobs = Jobs(LocalRunner(tmp_path / "data"))
    jobs.start("job-3", ImportJob(source=url, target=str(tmp_path / "disk.raw")))
    _progress(jobs, "job-3")
    assert jobs.restart("job-3", ImportJob(source=url, target="x")) is False  # it runs
    pid = json.loads((tmp_path / "data/jobs/job-3/state.json").read_text())["pid"]
    os.killpg(pid, signal.SIGKILL)
    lost = _ended(jobs, "job-3")
    assert isinstance(lost, Failed) and lost.lost and lost.reason == WORKER_LOST
    assert f"exit code {-signal.SIGKILL}" in lost.message


def test_a_result_of_another_shape_is_a_failure_saying_so(tmp_path: Path) -> None:
    (tmp_path / "disk.img").write_bytes(b"\0" * MiB)
    jobs = Jobs(LocalRunner(tmp_path / "data"))
    jobs.start("job-4", ImportJob(source=str(tmp_path / "disk.img"), target=str(tmp_path / "t")))
    wrong = _ended(jobs, "job-4", ServeResult)
    assert isinstance(wrong, Failed) and wrong.reason == BAD_RESULT
    assert "not a ServeResult" in wrong.message and "listenPort" in wrong.message


def _chores(repo: Path, **fields) -> tuple[ChoresJob, list[JobFile]]:
    """A chores job on the repository `repo`, and the file with its password."""
    job = ChoresJob(repo=str(repo), passwordFile="password", **fields)
    return job, [JobFile("password", b"lifecycle password", credential=True)]


def test_a_chore_runs_to_one_outcome_and_a_failed_one_again_when_asked(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(tmp_path / "cache"))
    jobs = Jobs(LocalRunner(tmp_path / "data"))
    opened = _chores(tmp_path / "repo", chores=Chores())
    failed = wait_until(lambda: jobs.chore("c-1", *opened, ChoresResult, "tag"))
    assert isinstance(failed, Failed) and failed.reason == "RepositoryNotFound"
    assert (tmp_path / "data/jobs/failed/c-1").is_dir()
    made = _chores(tmp_path / "repo", create=True, chores=Chores())
    done = wait_until(lambda: jobs.chore("c-1", *made, ChoresResult, "tag"))
    assert isinstance(done, Succeeded) and done.result.created
    assert jobs.poll("c-1", ChoresResult) is None
    assert not (tmp_path / "data/jobs/failed/c-1").exists()

    runs = [("c-2", *opened), ("c-3", *_chores(tmp_path / "elsewhere", chores=Chores()))]
    ended = wait_until(lambda: jobs.chores(runs, ChoresResult, "tag"))
    assert isinstance(ended[0], Succeeded) and ended[0].result.repository == done.result.repository
    assert isinstance(ended[1], Failed) and ended[1].reason == "RepositoryNotFound"


def test_work_is_handed_to_a_job_that_waits_for_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(tmp_path / "cache"))
    jobs = Jobs(LocalRunner(tmp_path / "data"))
    made = _chores(tmp_path / "repo", create=True, chores=Chores())
    wait_until(lambda: jobs.chore("made", *made, ChoresResult, "tag"))
    waiting = _chores(tmp_path / "repo", chores_file="chores.json", output="read.json")
    work = ("chores.json", Chores(read=["nothing"]))
    jobs.start("h-1", *waiting)
    wait_until(lambda: (o := jobs.poll("h-1", ChoresResult)) and o.progress)
    done = wait_until(lambda: jobs.handed("h-1", *waiting, work, ChoresResult, "t", ["read.json"]))
    assert isinstance(done, Succeeded) and done.result.read
    assert MetadataRead.model_validate_json(done.outputs["read.json"]).documents == {
        "nothing": None
    }
    assert jobs.poll("h-1", ChoresResult) is None

    jobs.start("h-2", *waiting)
    wait_until(lambda: (o := jobs.poll("h-2", ChoresResult)) and o.progress)
    jobs.cancel("h-2")
    assert wait_until(lambda: isinstance(o := jobs.poll("h-2", ChoresResult), Failed) and o)
    again = wait_until(lambda: jobs.handed("h-2", *waiting, work, ChoresResult, "tag"))
    assert isinstance(again, Succeeded) and again.result.read and again.outputs == {}
