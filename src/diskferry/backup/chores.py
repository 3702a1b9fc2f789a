"""A control plane's chores in a repository, on one opening of it (one key derivation): the
repository made when absent and asked, then snapshot sizes and metadata read, the metadata
listed, a document stored with the trackers it asks for, snapshots forgotten with the
metadata that describes them, and a prune. What they read goes to the job's `output` (see
`diskferry.worker.output`: a file here, the Pod's log in a cluster), not into the result line;
a job that names one always writes it, so that its absence tells of an output lost.

The chores may come after the job started (`choresFile`): the repository is opened while the
control plane still waits for what to do, so that the opening is not on its path. No lock is
taken before the chores come.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict
from pathlib import Path

from pydantic import ValidationError

from diskferry.backup.errors import RepositoryNotFoundError
from diskferry.backup.job import (
    Chores,
    ChoresJob,
    ChoresResult,
    Forgetting,
    MetadataListing,
    MetadataRead,
    PruneResult,
    StoredMetadata,
)
from diskferry.backup.metadata import delete_metadata, list_metadata, load_metadata, save_metadata
from diskferry.backup.phases import RepoPhase
from diskferry.backup.prune import prune
from diskferry.backup.repository import Repository
from diskferry.base.errors import CancelledError, DiskferryError
from diskferry.disk.progress import Progress
from diskferry.worker.job import JOB_FILE, validation_message
from diskferry.worker.output import write_output
from diskferry.worker.reporter import QUIET, Reporter

AWAIT_SECONDS = 0.05
"""How often a worker waiting for its chores looks for their file."""


class ChoresFileError(DiskferryError):
    """The chores' file is not JSON, or not chores; or chores read with no `output` to write."""

    reason = "BadJob"


def run_chores(
    job: ChoresJob,
    progress: Progress,
    cancel: threading.Event | None = None,
    reporter: Reporter = QUIET,
) -> ChoresResult:
    """Open the job's repository (make it when absent and `create`), then run its chores."""
    progress.set_phase(RepoPhase.OPENING)
    repo, created = _opened(job)
    with repo:
        chores = job.chores if job.chores is not None else _awaited(job.chores_file or "", cancel)
        if chores.reads and job.output is None:
            raise ChoresFileError("chores that read metadata need an output file")
        done = ChoresResult(repository=repo.id, created=created, encrypted=repo.config.encrypted)
        for snapshot in chores.sizes:
            done.sizes[snapshot] = repo.load_snapshot_info(repo.find_snapshot(snapshot)).disk_size
        read = MetadataRead()
        for name in chores.read:
            read.documents[name] = load_metadata(repo, name)
        if chores.listing is not None:
            read.names = _listed(repo, chores.listing, read)
        if job.output is not None:
            write_output(job.output, read.model_dump_json(by_alias=True).encode())
            done.read = True
        if chores.store is not None:
            _store(repo, chores.store)
        if chores.forget is not None:
            _forget(repo, chores.forget, job, cancel, reporter, done)
        if chores.prune == "always" or (chores.prune == "ifForgotten" and done.forgotten):
            progress.set_phase(RepoPhase.PRUNING)
            stats = prune(repo, wait=job.lock_wait, notify=reporter.note, cancel=cancel)
            done.pruned = PruneResult(**asdict(stats))
    return done


def _opened(job: ChoresJob) -> tuple[Repository, bool]:
    """The job's repository, and whether it was made now."""
    try:
        return job.open_repository(), False
    except RepositoryNotFoundError:
        if not job.create:
            raise
    password = job.password()
    made = Repository.init(job.repo, password, s3=job.s3_options(), encrypted=password is not None)
    return made, True


def _awaited(name: str, cancel: threading.Event | None) -> Chores:
    """The chores of the file `name` beside the job file, once it is there (CancelledError
    when `cancel` is set first)."""
    path = Path(name)
    stop = cancel or threading.Event()
    while not path.exists():
        if stop.wait(AWAIT_SECONDS):
            raise CancelledError("cancelled while waiting for the chores")
    try:
        return Chores.model_validate(json.loads(path.read_text()), context={JOB_FILE: True})
    except ValueError as e:
        why = validation_message(e) if isinstance(e, ValidationError) else str(e)
        raise ChoresFileError(f"the chores' file {name} is not valid: {why}") from None


def _listed(repo: Repository, listing: MetadataListing, read: MetadataRead) -> list[str]:
    """The repository's metadata names; the documents of those the listing asks for read."""
    names = list_metadata(repo)
    known = set(listing.known)
    for name in names:
        if name.startswith(listing.prefix) and name not in known:
            read.documents[name] = load_metadata(repo, name)
    return names


def _store(repo: Repository, stored: StoredMetadata) -> None:
    """Store the document, with the trackers it asks for as they are now."""
    document = dict(stored.document)
    if stored.trackers:
        trackers = {vm: repo.load_tracker(vm) for vm in stored.trackers}
        document["trackers"] = {
            vm: None if tracker is None else tracker.model_dump(mode="json")
            for vm, tracker in trackers.items()
        }
    save_metadata(repo, stored.name, document)


def _forget(
    repo: Repository,
    forgetting: Forgetting,
    job: ChoresJob,
    cancel: threading.Event | None,
    reporter: Reporter,
    done: ChoresResult,
) -> None:
    """Forget the snapshots asked for (those the policy lets go, when one is given) that the
    repository has, then the metadata that describes only snapshots forgotten now."""
    wanted = set(forgetting.snapshots)
    with repo.lock("shared", "forget", wait=job.lock_wait, notify=reporter.note, cancel=cancel):
        if forgetting.keep is not None:
            named = [s for s in repo.list_snapshots() if s.id in wanted]
            chosen = [s.id for s in forgetting.keep.to_forget(named)]
        else:
            present = {path.rsplit("/", 1)[1] for path in repo.snapshot_paths()}
            chosen = sorted(wanted & present)
        repo.forget(chosen)
        done.forgotten = chosen
        for name, described in forgetting.metadata.items():
            if not described or set(described) <= set(chosen):
                delete_metadata(repo, name)
                done.deleted_metadata.append(name)
