"""The repository operations as engine functions, each taking the locks it needs.

init, check, forget, prune, chain reset, CBT enable/disable, and upgrade: the CLI parses flags
and prints, the worker runs them as jobs (all but upgrade, a user's step taken once), and
both call these. A set `cancel` ends a wait for a lock, and an operation not yet writing,
with CancelledError.
"""

from __future__ import annotations

import threading
from dataclasses import asdict

from diskferry.backup.check import CheckReport, check
from diskferry.backup.engine import reset_chain
from diskferry.backup.job import (
    CbtJob,
    ChainResetJob,
    ChainResetResult,
    CheckJob,
    ForgetJob,
    ForgetResult,
    InitJob,
    InitResult,
    PruneJob,
    PruneResult,
    UpgradeJob,
    UpgradeResult,
)
from diskferry.backup.phases import RepoPhase
from diskferry.backup.prune import REPACK_UNUSED_SHARE, prune
from diskferry.backup.repository import Repository
from diskferry.backup.upgrade import upgrade
from diskferry.base.errors import CancelledError
from diskferry.disk.progress import Progress
from diskferry.qemu import cbt
from diskferry.worker.reporter import QUIET, Reporter


def _stop_if(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise CancelledError("cancelled")


def init_repository(job: InitJob, progress: Progress) -> InitResult:
    """Make the job's repository: keys first, config last."""
    progress.set_phase(RepoPhase.INITIALIZING)
    password = job.password() if job.encrypted else None
    with Repository.init(
        job.repo,
        password,
        chunk_size=job.chunk_size,
        max_incrementals=job.max_incrementals,
        encrypted=job.encrypted,
        s3=job.s3_options(),
    ) as made:
        return InitResult(
            repository=made.id,
            url=made.url,
            chunk_size=made.config.chunk_size,
            encrypted=made.config.encrypted,
            max_incrementals=made.config.max_incrementals,
        )


def check_repository(
    job: CheckJob,
    progress: Progress,
    cancel: threading.Event | None = None,
    reporter: Reporter = QUIET,
) -> CheckReport:
    """Check the repository under a shared lock; with `read_data`, every chunk too."""
    progress.set_phase(RepoPhase.OPENING)

    def on_pack(size: int) -> None:
        _stop_if(cancel)
        progress.add(size)

    with (
        job.open_repository() as repo,
        repo.lock("shared", "check", wait=job.lock_wait, notify=reporter.note, cancel=cancel),
    ):
        progress.set_phase(RepoPhase.CHECKING)
        return check(repo, read_data=job.read_data, on_pack=on_pack, on_total=progress.set_total)


def forget_snapshots(
    job: ForgetJob,
    progress: Progress,
    cancel: threading.Event | None = None,
    reporter: Reporter = QUIET,
) -> ForgetResult:
    """Drop the snapshots named, and those the keep policy lets go (their data goes at prune)."""
    with (
        job.open_repository() as repo,
        repo.lock("shared", "forget", wait=job.lock_wait, notify=reporter.note, cancel=cancel),
    ):
        progress.set_phase(RepoPhase.FORGETTING)
        ids = list(job.snapshots)
        if job.has_policy:
            chosen = job.to_forget(repo.list_snapshots(job.vm))
            ids.extend(s.id for s in chosen if s.id not in ids)
        _stop_if(cancel)
        paths = repo.forget(ids)
    return ForgetResult(forgotten=[p.removeprefix("snapshots/") for p in paths])


def prune_repository(
    job: PruneJob,
    progress: Progress,
    cancel: threading.Event | None = None,
    reporter: Reporter = QUIET,
) -> PruneResult:
    """Delete data no snapshot names and repack mostly unused packs, under an exclusive lock."""
    progress.set_phase(RepoPhase.PRUNING)
    with job.open_repository() as repo:
        stats = prune(
            repo,
            repack_share=0.0 if job.repack_all else REPACK_UNUSED_SHARE,
            wait=job.lock_wait,
            notify=reporter.note,
            cancel=cancel,
        )
    return PruneResult(**asdict(stats))


def reset_vm_chain(
    job: ChainResetJob,
    progress: Progress,
    cancel: threading.Event | None = None,
    reporter: Reporter = QUIET,
) -> ChainResetResult:
    """Forget a VM's tracked checkpoints under its VM lock, so its next backup is full."""
    with (
        job.open_repository() as repo,
        repo.lock(
            "vm", "chain reset", vm=job.vm, wait=job.lock_wait, notify=reporter.note, cancel=cancel
        ),
    ):
        progress.set_phase(RepoPhase.RESETTING_CHAIN)
        _stop_if(cancel)
        return ChainResetResult(vm=job.vm, disks=reset_chain(repo, job.vm, job.disks))


def upgrade_repository(
    job: UpgradeJob,
    progress: Progress,
    cancel: threading.Event | None = None,
    reporter: Reporter = QUIET,
) -> UpgradeResult:
    """Bring a format-2 repository to format 3 under the exclusive lock (see upgrade.py)."""
    progress.set_phase(RepoPhase.UPGRADING)
    return upgrade(
        job.repo,
        job.password(),
        plaintext_ok=job.insecure_no_encryption,
        s3=job.s3_options(),
        wait=job.lock_wait,
        notify=reporter.note,
        cancel=cancel,
    )


def change_cbt(job: CbtJob, progress: Progress) -> cbt.CbtDisk:
    """Enable or disable CBT on the job's volume (the VM stopped); the volume and its overlay."""
    progress.set_phase(RepoPhase.CHANGING_CBT)
    return cbt.enable(job.volume) if job.kind == "cbtEnable" else cbt.disable(job.volume)
