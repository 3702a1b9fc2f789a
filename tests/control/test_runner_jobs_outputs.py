"""A job that succeeded but whose output cannot be read (in a cluster, its Pod's log rotated) is
never taken as having written nothing: it runs again, and fails saying so once it lost its
output OUTPUT_TRIES times in a row."""

from __future__ import annotations

from collections.abc import Sequence

from diskferry.backup import Chores, ChoresJob, ChoresResult
from diskferry.control.runtime.runner.base import JobFile, JobState
from diskferry.control.runtime.runner.jobs import OUTPUT_LOST, OUTPUT_TRIES, Failed, Jobs, Succeeded
from diskferry.worker.job import WorkerJob

RESULT = {"ok": True, "repository": "r", "created": False, "encrypted": True, "read": True}


class LosingRunner:
    """Runs each job to an `ok` end at once; its output is lost in the first `losses` runs."""

    def __init__(self, losses: int) -> None:
        self.losses = losses
        self.runs = 0
        self.jobs: dict[str, bool] = {}  # job id -> kept

    def start(self, job_id: str, job: WorkerJob, files: Sequence[JobFile] = ()) -> None:
        if job_id not in self.jobs:
            self.jobs[job_id] = False
            self.runs += 1

    def state(self, job_id: str) -> JobState | None:
        if job_id not in self.jobs:
            return None
        return JobState(job_id, False, result=RESULT, exit_code=0, kept=self.jobs[job_id])

    def log_tail(self, job_id: str, lines: int = 200) -> list[str]:
        return []

    def read_file(self, job_id: str, name: str) -> bytes | None:
        return None if self.runs <= self.losses else b"{}"

    def purge(self, job_id: str, keep_scratch: bool) -> bool:
        if keep_scratch:
            self.jobs[job_id] = True
        else:
            self.jobs.pop(job_id, None)
        return True

    def forget(self, job_id: str) -> bool:
        self.jobs.pop(job_id, None)
        return True


def _chore(jobs: Jobs) -> Succeeded[ChoresResult] | Failed | None:
    job = ChoresJob(repo="/r", chores=Chores(read=["m"]), output="read.json")
    return jobs.chore("c-1", job, [], ChoresResult, "tag", ("read.json",))


def _ended(jobs: Jobs) -> Succeeded[ChoresResult] | Failed:
    for _ in range(10):
        if (outcome := _chore(jobs)) is not None:
            return outcome
    raise AssertionError("the chore never ended")


def test_a_job_whose_output_was_lost_runs_again() -> None:
    runner = LosingRunner(losses=OUTPUT_TRIES - 1)
    done = _ended(Jobs(runner))
    assert isinstance(done, Succeeded) and done.outputs == {"read.json": b"{}"}
    assert runner.runs == OUTPUT_TRIES
    assert runner.jobs == {}


def test_a_job_that_keeps_losing_its_output_fails_saying_so() -> None:
    runner = LosingRunner(losses=OUTPUT_TRIES)
    jobs = Jobs(runner)
    failed = _ended(jobs)
    assert isinstance(failed, Failed) and failed.reason == OUTPUT_LOST
    assert "its output read.json cannot be read" in failed.message
    assert runner.runs == OUTPUT_TRIES
    again = _ended(jobs)  # asked again: started afresh
    assert isinstance(again, Succeeded) and runner.runs == OUTPUT_TRIES + 1
