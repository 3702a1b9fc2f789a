"""The one life every job a reconciler runs goes through: started, polled into an outcome
(running with its progress, succeeded with its typed result, failed with a reason and a
message, or lost), and settled: its log tail emitted tagged with the object, a failed job's
scratch kept for debugging, a succeeded or cancelled one's removed.

A job's id is derived from its object's uid and what the job does, so that a reconciler that
restarts finds the job it started, running or ended with its result. A failed job that was
settled stays `kept` until the same chore is started again (`restart`), which forgets it.

A job may be started before its work is known, to wait for it in a file it names: its
start-up (a repository's key derivation) is then done by the time the work is handed to it
(`handed`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from diskferry.control.runtime.runner.base import LOG_LINES, JobFile, JobState, Runner
from diskferry.worker.job import WorkerJob, validation_message

log = logging.getLogger("diskferry.control")
R = TypeVar("R", bound=BaseModel)
WORKER_LOST = "WorkerLost"
BAD_RESULT = "BadResult"
JOB_FAILED = "JobFailed"
CANCELLED = "Cancelled"
"""The reason of a job's result once it was stopped."""
OUTPUT_LOST = "OutputLost"
"""The reason of a job that succeeded but whose output cannot be read (in a cluster, its Pod's
log was rotated or cut): it runs again, OUTPUT_TRIES times in all, before it fails so."""
OUTPUT_TRIES = 3


@dataclass(frozen=True)
class Running:
    """The job runs; `progress` is its /progress, None before it answered."""

    progress: dict[str, Any] | None


@dataclass(frozen=True)
class Succeeded(Generic[R]):
    """The job ended with its result, and the output files asked for that it wrote (what does
    not fit a result line), read before it was settled."""

    result: R
    outputs: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Failed:
    """The job ended without success: why, in its result's words; `lost` when its worker ended
    without a result; `kept` when it was settled already (its scratch kept)."""

    reason: str
    message: str
    lost: bool = False
    kept: bool = False

    @property
    def cancelled(self) -> bool:
        """Whether the job was stopped before it ended."""
        return self.reason == CANCELLED


Outcome = Running | Succeeded[R] | Failed


def failure(state: JobState, tail: list[str]) -> Failed:
    """The failure of an ended job that did not succeed: its result's reason and message, or
    WorkerLost naming its exit code and the last line it logged."""
    if state.result is not None:
        reason = str(state.result.get("reason") or JOB_FAILED)
        message = str(state.result.get("message") or "the worker failed")
        return Failed(reason, message, kept=state.kept)
    last = f": {tail[-1]}" if tail else ""
    message = f"the worker ended without a result (exit code {state.exit_code}){last}"
    return Failed(WORKER_LOST, message, lost=True, kept=state.kept)


def _output_lost(names: Sequence[str]) -> Failed:
    """The failure of a job that succeeded but whose outputs `names` cannot be read."""
    what = " ".join(["its output", *names])
    message = (
        f"the worker succeeded but {what} cannot be read (a worker in a Pod writes it into "
        "its log, which may have been rotated or cut)"
    )
    return Failed(OUTPUT_LOST, message)


class Jobs:
    """Starts, polls and settles jobs through `runner`."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self._lost: dict[str, int] = {}

    def start(
        self,
        job_id: str,
        job: WorkerJob,
        files: Sequence[JobFile] = (),
        for_claim: tuple[str, str] | None = None,
    ) -> None:
        """Start `job` as `job_id` (for the object of the claim `for_claim`, see
        `Runner.start`), unless a job of that id was started."""
        self.runner.start(job_id, job, files, for_claim)

    def restart(self, job_id: str, job: WorkerJob, files: Sequence[JobFile] = ()) -> bool:
        """Start `job` as `job_id` afresh, a settled job of that id forgotten first; False while
        one still runs (it is asked to stop, and nothing is started)."""
        if not self.runner.forget(job_id):
            return False
        self.runner.start(job_id, job, files)
        return True

    def hand(self, job_id: str, name: str, work: BaseModel) -> None:
        """Give the running job `work` as its file `name` (camelCase JSON), replaced at once."""
        self.runner.write_file(job_id, name, work.model_dump_json(by_alias=True).encode())

    def poll(self, job_id: str, result: type[R]) -> Outcome[R] | None:
        """The job's outcome, its result read as a `result`; None when no job of that id was
        started (or it was forgotten)."""
        state = self.runner.state(job_id)
        if state is None:
            return None
        if state.running:
            return Running(state.progress)
        if not state.succeeded:
            return failure(state, self.runner.log_tail(job_id, 1))
        if state.kept:  # settled as a failure: its output was lost
            return replace(_output_lost(()), kept=True)
        try:
            return Succeeded(result.model_validate(state.result))
        except ValidationError as e:
            message = f"its result is not a {result.__name__}: {validation_message(e)}"
            return Failed(BAD_RESULT, message, kept=state.kept)

    def emit_log(self, job_id: str, tag: str, lines: int = LOG_LINES) -> None:
        """Put the job's last `lines` log lines into the daemon's log, each tagged with `tag`."""
        for line in self.runner.log_tail(job_id, lines):
            log.info("%s: %s", tag, line)

    def settle(self, job_id: str, tag: str, keep: bool, lines: int = LOG_LINES) -> bool:
        """Emit the ended job's log tail tagged with `tag`, then remove its files, or keep them
        (under jobs/failed/) when `keep`; False while it still runs (it is cancelled then)."""
        state = self.runner.state(job_id)
        if state is not None and not state.running and not state.kept:
            self.emit_log(job_id, tag, lines)
        return self.runner.purge(job_id, keep_scratch=keep)

    def chore(
        self,
        job_id: str,
        job: WorkerJob,
        files: Sequence[JobFile],
        result: type[R],
        tag: str,
        outputs: Sequence[str] = (),
    ) -> Succeeded[R] | Failed | None:
        """Run `job` as `job_id` to its end, one call at a time (see `chores`): None while it
        runs, then its outcome, once."""
        ended = self.chores([(job_id, job, files)], result, tag, outputs)
        return None if ended is None else ended[0]

    def chores(
        self,
        runs: Sequence[tuple[str, WorkerJob, Sequence[JobFile]]],
        result: type[R],
        tag: str,
        outputs: Sequence[str] = (),
    ) -> list[Succeeded[R] | Failed] | None:
        """Run the jobs of `runs` (id, job, files) to their ends, one call at a time: each is
        started when no job of its id is there (a failure of it settled earlier is forgotten
        and started afresh); None while any runs; once all ended, each is settled (see
        `settle`, the `outputs` of one that succeeded read first: one whose output is lost
        runs again, see `_again`) and their outcomes given in the order of `runs`."""
        ended: list[Succeeded[R] | Failed] = []
        for job_id, job, files in runs:
            polled = self.poll(job_id, result)
            if polled is None or (isinstance(polled, Failed) and polled.kept):
                self.restart(job_id, job, files)
            elif not isinstance(polled, Running):
                ended.append(polled)
        if len(ended) < len(runs):
            return None
        read = [
            self._read(job_id, o, outputs) for (job_id, _, _), o in zip(runs, ended, strict=True)
        ]
        again = [self._again(job_id, o, tag) for (job_id, _, _), o in zip(runs, read, strict=True)]
        if any(again):
            return None
        for (job_id, _, _), outcome in zip(runs, read, strict=True):
            self.settle(job_id, tag, keep=isinstance(outcome, Failed))
        return read

    def _read(
        self, job_id: str, outcome: Succeeded[R] | Failed, outputs: Sequence[str]
    ) -> Succeeded[R] | Failed:
        """The ended job's outcome, with the `outputs` it wrote when it succeeded (a job that
        succeeded without writing one of them failed: OUTPUT_LOST)."""
        if not isinstance(outcome, Succeeded):
            return outcome
        written = {name: self.runner.read_file(job_id, name) for name in outputs}
        lost = sorted(name for name, data in written.items() if data is None)
        found = {name: data for name, data in written.items() if data is not None}
        return replace(outcome, outputs=found) if not lost else _output_lost(lost)

    def _again(self, job_id: str, outcome: Succeeded[R] | Failed, tag: str) -> bool:
        """Whether the ended job is to run again: its output was lost (OUTPUT_LOST) fewer than
        OUTPUT_TRIES times in a row. It is settled as a failure then (kept), which the next
        call starts again."""
        tries = self._lost.pop(job_id, 0) + 1
        if not isinstance(outcome, Failed) or outcome.reason != OUTPUT_LOST:
            return False
        if tries >= OUTPUT_TRIES:
            return False
        log.warning("%s: %s; it runs again", tag, outcome.message)
        self.settle(job_id, tag, keep=True)
        self._lost[job_id] = tries
        return True

    def handed(
        self,
        job_id: str,
        job: WorkerJob,
        files: Sequence[JobFile],
        work: tuple[str, BaseModel],
        result: type[R],
        tag: str,
        outputs: Sequence[str] = (),
    ) -> Succeeded[R] | Failed | None:
        """Run `work` (a file's name and what it holds) in the job `job_id`, a `job` that
        waits for that file, one call at a time: the job started unless one waits already
        (one that ended before it had its work is settled and started again), the work handed
        to it, None until it ended; then settled, and its outcome (with its `outputs`) given
        once."""
        name, given = work
        polled = self.poll(job_id, result)
        handed = self.runner.read_file(job_id, name) is not None
        if isinstance(polled, Failed) and not polled.kept and not handed:
            self.settle(job_id, tag, keep=True)  # it ended before it had its work
            polled = replace(polled, kept=True)
        if polled is None or (isinstance(polled, Failed) and polled.kept):
            self.restart(job_id, job, files)
        elif not isinstance(polled, Running):
            outcome = self._read(job_id, polled, outputs)
            if self._again(job_id, outcome, tag):
                return None
            self.settle(job_id, tag, keep=isinstance(outcome, Failed))
            return outcome
        if not handed or not isinstance(polled, Running):
            self.hand(job_id, name, given)
        return None

    def cancel(self, job_id: str) -> None:
        """Ask the job to stop; nothing when it has ended."""
        self.runner.cancel(job_id)

    def stop(self, job_id: str) -> bool:
        """Stop the job and remove everything of it, kept files and log tail too; False while
        it still runs."""
        return self.runner.forget(job_id)
