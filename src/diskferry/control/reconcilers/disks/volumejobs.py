"""The volume jobs a reconciler has a worker run on a claim: a blank disk, a claim grown, an
instant copy (reflink) with the guests that write its source frozen for that instant, and the
probe that reads the size of a claim's source before a claim made with its size is made. Each
runs under an id of its own, `<prefix>-<what>-<uid>`, beside the object's import job, so a
reconcile that restarts finds it; the worker writes the claim, the daemon never does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel

from diskferry.control.host.volumes import Claim
from diskferry.control.runtime.runner.base import JobFile
from diskferry.control.runtime.runner.jobs import Failed, Jobs, Outcome, Running
from diskferry.importer import BlankJob, GrowJob, ReflinkJob
from diskferry.worker.job import WorkerJob

R = TypeVar("R", bound=BaseModel)
BLANK = "blank"
GROW = "grow"
REFLINK = "reflink"
PROBE = "probe"


def volume_job_id(prefix: str, what: str, uid: str | None) -> str:
    """The id of the `what` job (blank, grow, reflink, probe) of the object of `prefix` and
    `uid`."""
    return f"{prefix}-{what}-{uid}"


def step(
    jobs: Jobs, job_id: str, job: WorkerJob, result: type[R], files: Sequence[JobFile] = ()
) -> Outcome[R]:
    """Start `job` as `job_id` (with `files`) unless it was, else its outcome; one that failed
    and was settled is started afresh, the reconcile that comes back to it wanting it again.
    One that succeeded gives its outcome until it is settled: it is the record of what it did
    for as long as nothing else records it."""
    polled = jobs.poll(job_id, result)
    if polled is None or (isinstance(polled, Failed) and polled.kept):
        jobs.restart(job_id, job, files)
        return Running(None)
    return polled


def blank_job(claim: Claim, size: int) -> BlankJob:
    """Make the file claim a sparse disk of `size` bytes."""
    return BlankJob(target=claim.path, size=size)


def grow_job(claim: Claim, size: int) -> GrowJob:
    """Grow the claim to `size` bytes: its file, and the loop device of a block claim."""
    return GrowJob(target=str(claim.file), size=size, device=claim.path if claim.block else None)


def reflink_job(
    source: str, claim: Claim, size: int | None = None, agents: Sequence[str] = ()
) -> ReflinkJob:
    """Copy `source` into the file claim at an instant, grown to `size`, with the guests whose
    agents listen at `agents` frozen for that instant."""
    return ReflinkJob(source=source, target=claim.path, size=size, freeze=list(agents))
