"""`python -m diskferry.backup.worker JOB.json`: one job of the backup engine, in a child process
or a Pod: a backup or a restore, a repository operation, a control plane's chores in a
repository, or hooks in a guest; the job's `kind` says which."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from diskferry.backup.errors import CheckFailedError
from diskferry.backup.job import (
    BackupJob,
    CbtJob,
    CbtResult,
    ChainResetJob,
    CheckJob,
    ChoresJob,
    ForgetJob,
    GuestHooksJob,
    InitJob,
    PruneJob,
    RepoAccess,
    RestoreJob,
)
from diskferry.worker.runtime import JobContext, JobKind, run_worker

J = TypeVar("J", bound=RepoAccess)


def opened_ahead(
    run: Callable[[J, JobContext], dict[str, Any]],
) -> Callable[[J, JobContext], dict[str, Any]]:
    """`run`, with its job's repository opening begun first: the key derivation goes on
    while `run` loads the engine it calls."""

    @functools.wraps(run)
    def with_opening(job: J, ctx: JobContext) -> dict[str, Any]:
        job.start_opening()
        return run(job, ctx)

    return with_opening


@opened_ahead
def backup(job: BackupJob, ctx: JobContext) -> dict[str, Any]:
    """Back up the job's disks."""
    from diskferry.backup.engine import run_backup

    return run_backup(job, ctx.progress, ctx.cancel, ctx.reporter).to_json()


@opened_ahead
def restore(job: RestoreJob, ctx: JobContext) -> dict[str, Any]:
    """Restore the job's snapshot."""
    from diskferry.backup.restore import run_restore

    return run_restore(job, ctx.progress, ctx.cancel, ctx.reporter).to_json()


def init(job: InitJob, ctx: JobContext) -> dict[str, Any]:
    """Make the job's repository."""
    from diskferry.backup.ops import init_repository

    return init_repository(job, ctx.progress).to_json()


@opened_ahead
def check(job: CheckJob, ctx: JobContext) -> dict[str, Any]:
    """Check the repository; damage fails the job (CheckFailed), naming what is damaged."""
    from diskferry.backup.ops import check_repository

    report = check_repository(job, ctx.progress, ctx.cancel, ctx.reporter)
    for problem in report.problems:
        ctx.reporter.warn("Damaged", problem.message)
    if not report.ok:
        raise CheckFailedError(report.summary())
    return report.to_json()


@opened_ahead
def forget(job: ForgetJob, ctx: JobContext) -> dict[str, Any]:
    """Drop the snapshots the job names or its policy lets go."""
    from diskferry.backup.ops import forget_snapshots

    return forget_snapshots(job, ctx.progress, ctx.cancel, ctx.reporter).to_json()


@opened_ahead
def prune(job: PruneJob, ctx: JobContext) -> dict[str, Any]:
    """Delete the data no snapshot names."""
    from diskferry.backup.ops import prune_repository

    return prune_repository(job, ctx.progress, ctx.cancel, ctx.reporter).to_json()


@opened_ahead
def chain_reset(job: ChainResetJob, ctx: JobContext) -> dict[str, Any]:
    """Make the VM's next backup full."""
    from diskferry.backup.ops import reset_vm_chain

    return reset_vm_chain(job, ctx.progress, ctx.cancel, ctx.reporter).to_json()


@opened_ahead
def chores(job: ChoresJob, ctx: JobContext) -> dict[str, Any]:
    """Open the repository (made when absent and asked), then run the control plane's chores."""
    from diskferry.backup.chores import run_chores

    return run_chores(job, ctx.progress, ctx.cancel, ctx.reporter).to_json()


def hooks(job: GuestHooksJob, ctx: JobContext) -> dict[str, Any]:
    """Run the hooks in the guest, in order, none after one that failed with onError Fail."""
    from diskferry.backup.hooks import run_guest_hooks

    return run_guest_hooks(job).to_json()


def change_cbt(job: CbtJob, ctx: JobContext) -> dict[str, Any]:
    """Enable or disable CBT on the job's volume."""
    from diskferry.backup.ops import change_cbt as change

    disk = change(job, ctx.progress)
    return CbtResult(volume=disk.volume, overlay=disk.overlay, enabled=disk.enabled).to_json()


KINDS = {
    "backup": JobKind(BackupJob, backup),
    "restore": JobKind(RestoreJob, restore),
    "init": JobKind(InitJob, init),
    "check": JobKind(CheckJob, check),
    "forget": JobKind(ForgetJob, forget),
    "prune": JobKind(PruneJob, prune),
    "chainReset": JobKind(ChainResetJob, chain_reset),
    "chores": JobKind(ChoresJob, chores),
    "hooks": JobKind(GuestHooksJob, hooks),
    "cbtEnable": JobKind(CbtJob, change_cbt),
    "cbtDisable": JobKind(CbtJob, change_cbt),
}

if __name__ == "__main__":
    run_worker(KINDS, default="backup")
