"""The backup engine: decide each disk, checkpoint them in one session, store synthetic fulls.

Full or incremental is decided once per disk (plan.decide), from the tracker's chain and
the checkpoints the session finds on the disk. A backup point that a server serves (KubeVirt's
Pull VirtualMachineBackup, diskferry's backup-point worker) is read through its disks' data
and map endpoints instead, incremental where its maps show the changes since the chain's
last checkpoint (plan.decide_point), its checkpoint the point's own. Order of writes: packs
and index (the pack writer), each disk's manifest, the VM's tracker; the session then drops
the checkpoints older than the new ones. A crash at any step leaves the tracker at a
checkpoint still on the disk, so nothing is lost. Entries flow from the disk (and the
parent's manifest, a page at a time) into the new manifest's spool, so memory does not
grow with the disk.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from diskferry.backup.entries import Entry, full_entries, overlay
from diskferry.backup.errors import RepositoryError
from diskferry.backup.hooks import run_hooks
from diskferry.backup.job import (
    BackupJob,
    BackupPoint,
    BackupResult,
    DiskResult,
    HookOutcome,
    PointDisk,
)
from diskferry.backup.pack_writer import PackWriter
from diskferry.backup.phases import BackupPhase
from diskferry.backup.plan import Decision, DiskPlan, Source, decide, decide_point
from diskferry.backup.reader import Piece, WalkOnce, dirty_pieces, full_pieces, store_pieces
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import (
    ManifestWriter,
    SnapshotInfo,
    check_name,
    new_snapshot_id,
    now_rfc3339,
    snapshot_path,
)
from diskferry.backup.trackers import Checkpoint, DiskChain, Tracker
from diskferry.base.errors import BAD_USAGE, CancelledError, DiskferryError
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.formats import RAW_DATA, volume_format
from diskferry.disk.point_volume import PointVolume
from diskferry.disk.progress import Progress
from diskferry.disk.schemes import is_nbd_url
from diskferry.disk.throttle import TokenBucket, bucket_for, throttled
from diskferry.disk.volume import Volume
from diskferry.nbd.open import open_volume
from diskferry.qemu import cbt
from diskferry.qemu.session import BackupSession, DiskExport, SessionDisk
from diskferry.worker.reporter import QUIET, EventType, Reporter

# checkpoints a tracker remembers per disk, newest last (only the newest is still on the disk)
TRACKER_HISTORY = 16


class BackupError(RepositoryError):
    """The backup cannot run as asked."""

    reason = "BackupFailed"


@dataclass
class _Reading:
    """A disk as the backup reads it: its plan, the decision, its volume and pieces."""

    plan: DiskPlan
    decision: Decision
    volume: Volume
    checkpoint: str | None
    pieces: Callable[[], Iterator[Piece]]


def _source(path: str) -> tuple[Source, str | None]:
    """How the disk at `path` is read, and its CBT overlay when it has one."""
    if is_nbd_url(path):
        return "nbd", None
    overlay = cbt.find(path).overlay
    return ("cbt" if overlay is not None else "raw"), overlay


def _check_raw(path: str) -> None:
    """Refuse a volume without CBT that holds an image format: its container is not the disk."""
    with FileVolume(path) as volume:
        fmt = volume_format(volume)
    if fmt not in RAW_DATA:
        raise BackupError(
            f"{path} is a {fmt} image, not a raw volume: back up a raw volume or its "
            f"CBT overlay (convert it first: qemu-img convert -O raw)",
            reason="UnsupportedFormat",
        )


def _plans(job: BackupJob, repo: Repository, tracker: Tracker) -> list[DiskPlan]:
    if len({d.name for d in job.disks}) != len(job.disks):
        raise BackupError("each --disk needs its own name", reason=BAD_USAGE)
    plans = []
    for disk in job.disks:
        check_name("disk", disk.name)
        source, overlay = _source(disk.path)
        if source == "raw":
            _check_raw(disk.path)
        if source == "raw" and job.qmp:
            raise BackupError(
                f"CBT is off on {disk.path}, which the running VM holds: stop the VM and run "
                f"'diskferry cbt enable {disk.path}' before backing it up with --qmp"
            )
        chain = tracker.disks.get(disk.name)
        last = chain.last if chain is not None else None
        parent_exists = last is not None and repo.store.exists(
            snapshot_path(job.vm, disk.name, last.snapshot)
        )
        plans.append(DiskPlan(disk.name, disk.path, source, chain, parent_exists, overlay))
    return plans


def _open_reading(
    plan: DiskPlan,
    decision: Decision,
    export: DiskExport | None,
    chunk_size: int,
    bucket: TokenBucket | None,
    cancel: threading.Event | None,
) -> _Reading:
    if export is None:
        volume = throttled(open_volume(plan.path, cancel=cancel), bucket, cancel)
        walk = WalkOnce(lambda: full_pieces(volume, chunk_size))
        return _Reading(plan, decision, volume, None, walk)
    opened = open_volume(
        export.url,
        bitmap=export.bitmap,
        cancel=cancel,
        data_file=export.data_file,
        quiescent=export.quiescent,
    )
    volume = throttled(opened, bucket, cancel)
    pieces = dirty_pieces if decision.mode == "incremental" else full_pieces
    walk = WalkOnce(lambda: pieces(volume, chunk_size))
    return _Reading(plan, decision, volume, export.checkpoint, walk)


def _open_point(
    job: BackupJob,
    point: BackupPoint,
    disk: PointDisk,
    token: str,
    repo: Repository,
    tracker: Tracker,
    limit: int,
    bucket: TokenBucket | None,
    cancel: threading.Event | None,
) -> _Reading:
    """A disk of a backup point as the backup reads it through its endpoints: incremental
    where the point's maps show the changes since the chain's last checkpoint, else whole."""
    check_name("disk", disk.name)
    chain = tracker.disks.get(disk.name)
    last = chain.last if chain is not None else None
    parent_exists = last is not None and repo.store.exists(
        snapshot_path(job.vm, disk.name, last.snapshot)
    )
    plan = DiskPlan(disk.name, disk.data, "point", chain, parent_exists)
    decision = decide_point(plan, disk.since, full=job.full, max_incrementals=limit)
    opened = PointVolume(
        disk.data,
        disk.map,
        token,
        ca_bundle=point.ca_file,
        changes=disk.since is not None,
        cancel=cancel,
    )
    volume = throttled(opened, bucket, cancel)
    pieces = dirty_pieces if decision.mode == "incremental" else full_pieces
    walk = WalkOnce(lambda: pieces(volume, repo.config.chunk_size))
    return _Reading(plan, decision, volume, point.checkpoint, walk)


def _bytes_to_read(readings: list[_Reading], cancel: threading.Event | None) -> int:
    """What the backup will read, walked piece by piece; CancelledError as soon as cancelled."""
    total = 0
    for reading in readings:
        for piece in reading.pieces():
            if cancel is not None and cancel.is_set():
                raise CancelledError("cancelled")
            total += piece.read_bytes
    return total


def run_backup(
    job: BackupJob,
    progress: Progress,
    cancel: threading.Event | None = None,
    reporter: Reporter = QUIET,
) -> BackupResult:
    """Back up the job's disks of one VM; each disk gets a snapshot, full or incremental.

    Each snapshot's description names the job (`job.job_id`).
    """
    check_name("VM", job.vm)
    progress.set_phase(BackupPhase.STARTING)
    locking = {"wait": job.lock_wait, "notify": reporter.note, "cancel": cancel}
    with (
        job.open_repository() as repo,
        repo.lock("vm", "backup", vm=job.vm, **locking),
        repo.lock("shared", "backup", **locking),
    ):
        limit = job.max_incrementals
        if limit is None:
            limit = repo.config.max_incrementals
        tracker = repo.load_tracker(job.vm) or Tracker(vm=job.vm)
        backup_id = new_snapshot_id()
        bucket = bucket_for(job.bandwidth_limit)
        with contextlib.ExitStack() as held:
            if job.point is not None:
                token = job.point.token()
                readings = []
                for disk in job.point.disks:
                    reading = _open_point(
                        job, job.point, disk, token, repo, tracker, limit, bucket, cancel
                    )
                    held.callback(reading.volume.close)
                    readings.append(reading)
                consistency, hooks = job.point.consistency, []
            else:
                readings, consistency, hooks = _volume_readings(
                    job, repo, tracker, limit, bucket, cancel, held, reporter
                )
            progress.set_total(_bytes_to_read(readings, cancel))
            progress.set_phase(BackupPhase.READING)
            results = _back_up_disks(repo, job, backup_id, readings, progress, cancel, reporter)
            progress.set_phase(BackupPhase.SAVING_TRACKER)
            _update_tracker(tracker, readings, results)
            repo.save_tracker(tracker)
        return BackupResult(
            backup=backup_id, vm=job.vm, consistency=consistency, disks=results, hooks=hooks
        )


def _volume_readings(
    job: BackupJob,
    repo: Repository,
    tracker: Tracker,
    limit: int,
    bucket: TokenBucket | None,
    cancel: threading.Event | None,
    held: contextlib.ExitStack,
    reporter: Reporter,
) -> tuple[list[_Reading], str, list[HookOutcome]]:
    """The job's volumes as the backup reads them, those with CBT checkpointed in one session
    that `held` keeps open, the job's hooks run around the point; and the consistency."""
    plans = _plans(job, repo, tracker)
    tracked = [p for p in plans if p.source == "cbt"]
    opened: BackupSession | None = None
    consistency = "crash-consistent"
    if tracked:
        session = BackupSession(
            [SessionDisk(p.name, p.path, p.overlay) for p in tracked],
            repo.id,
            qmp_socket=job.qmp,
            nbd_socket=job.nbd_socket,
            qga_socket=job.qga,
        )
        consistency = session.consistency
        opened = held.enter_context(session)
    on_disk = opened.checkpoints if opened is not None else {}
    decisions = [
        decide(p, on_disk.get(p.name, []), full=job.full, max_incrementals=limit) for p in plans
    ]
    exports: list[DiskExport] = []
    hooks: list[HookOutcome] = []
    if opened is not None:
        since = {p.name: d.since for p, d in zip(plans, decisions, strict=True)}
        hooks += _hooks(job, "pre", reporter)
        exports = opened.start(since)
        hooks += _hooks(job, "post", reporter)
    by_name = {e.name: e for e in exports}
    readings = []
    for plan, decision in zip(plans, decisions, strict=True):
        export = by_name.get(plan.name)
        chunk_size = repo.config.chunk_size
        reading = _open_reading(plan, decision, export, chunk_size, bucket, cancel)
        held.callback(reading.volume.close)
        readings.append(reading)
    return readings, consistency, hooks


def _hooks(job: BackupJob, phase: str, reporter: Reporter) -> list[HookOutcome]:
    """Run the job's hooks of `phase` in the guest, when it names an agent to run them."""
    if job.hook_agent is None or not job.hooks:
        return []
    return run_hooks(job.hook_agent, job.hooks, phase, reporter)


def _back_up_disks(
    repo: Repository,
    job: BackupJob,
    backup_id: str,
    readings: list[_Reading],
    progress: Progress,
    cancel: threading.Event | None,
    reporter: Reporter,
) -> list[DiskResult]:
    """Each disk's snapshot, or none. Every disk is read first, its manifest spooled; only then
    are the manifests stored, one small write each, so that a backup killed while it reads
    leaves no snapshot (its chunks go at the next prune). A failure while they are stored takes
    those stored out again."""
    with contextlib.ExitStack() as spools:
        read = [
            _back_up_disk(repo, job, backup_id, reading, progress, cancel, reporter, spools)
            for reading in readings
        ]
        stored: list[str] = []
        try:
            for result, manifest, info in read:
                repo.save_snapshot(manifest, info)
                stored.append(result.snapshot)
        except BaseException:
            with contextlib.suppress(DiskferryError, OSError):  # the first failure is the one told
                repo.forget(stored)
            raise
    return [result for result, _, _ in read]


def _back_up_disk(
    repo: Repository,
    job: BackupJob,
    backup_id: str,
    reading: _Reading,
    progress: Progress,
    cancel: threading.Event | None,
    reporter: Reporter,
    spools: contextlib.ExitStack,
) -> tuple[DiskResult, ManifestWriter, SnapshotInfo]:
    """Read one disk into the repository's packs; its result, and its manifest spooled in
    `spools` with its description, for the caller to store."""
    plan, decision = reading.plan, reading.decision
    started, clock = now_rfc3339(), time.monotonic()
    reporter.event(
        EventType.NORMAL,
        "DiskBackup",
        f"disk {plan.name}: {decision.mode} backup ({decision.reason})",
    )
    size = reading.volume.size
    snapshot_id = new_snapshot_id()
    read = 0

    def runs(writer: PackWriter) -> Iterator[Entry]:
        nonlocal read
        for entry, n in store_pieces(reading.volume, reading.pieces(), writer, progress, cancel):
            read += n
            yield entry

    manifest = spools.enter_context(
        repo.new_snapshot(snapshot_path(job.vm, plan.name, snapshot_id))
    )
    with repo.pack_writer() as writer:
        if decision.parent is not None:
            parent = repo.load_snapshot(snapshot_path(job.vm, plan.name, decision.parent))
            manifest.write(overlay(parent.entries(), runs(writer), size))
        else:
            manifest.write(full_entries(runs(writer), size))
    seconds = round(time.monotonic() - clock, 3)
    stats = writer.stats
    info = SnapshotInfo(
        id=snapshot_id,
        vm=job.vm,
        disk=plan.name,
        backup=backup_id,
        disk_size=size,
        chunk_size=repo.config.chunk_size,
        type=decision.mode,
        reason=decision.reason,
        parent=decision.parent,
        checkpoint=reading.checkpoint,
        started=started,
        finished=now_rfc3339(),
        stats={
            "bytesRead": read,
            "bytesNew": stats.bytes_new,
            "bytesUploaded": stats.bytes_uploaded,
            "seconds": seconds,
        },
        tags=job.tags,
        job=job.job_id,
    )
    result = DiskResult(
        disk=plan.name,
        snapshot=info.id,
        type=info.type,
        reason=info.reason,
        cbt=plan.source in ("cbt", "point"),
        bytes_read=read,
        bytes_new=stats.bytes_new,
        bytes_uploaded=stats.bytes_uploaded,
        seconds=seconds,
        checkpoint=reading.checkpoint,
    )
    return result, manifest, info


def _update_tracker(tracker: Tracker, readings: list[_Reading], results: list[DiskResult]) -> None:
    for reading, result in zip(readings, results, strict=True):
        if reading.checkpoint is None:
            tracker.disks[result.disk] = DiskChain()
            continue
        chain = tracker.disks.get(result.disk) or DiskChain()
        done = Checkpoint(name=reading.checkpoint, snapshot=result.snapshot)
        tracker.disks[result.disk] = DiskChain(
            checkpoints=[*chain.checkpoints, done][-TRACKER_HISTORY:],
            incrementals_since_full=(
                chain.incrementals_since_full + 1 if result.type == "incremental" else 0
            ),
        )
    tracker.updated = now_rfc3339()


def reset_chain(repo: Repository, vm: str, disks: list[str] | None = None) -> list[str]:
    """Forget the tracked checkpoints of a VM's disks (all, or those named): next backup is full.

    A VM, or a named disk, that nothing was tracked for is an error: nothing is reset then.
    """
    tracker = repo.load_tracker(vm)
    if tracker is None:
        raise BackupError(
            f"nothing is tracked for VM {vm} in this repository: no chain to reset",
            reason="NothingTracked",
        )
    unknown = [d for d in disks or [] if d not in tracker.disks]
    if unknown:
        raise BackupError(
            f"nothing is tracked for disk {', '.join(unknown)} of VM {vm} "
            f"(tracked: {', '.join(tracker.disks) or 'none'}): no chain to reset",
            reason="NothingTracked",
        )
    names = [d for d in tracker.disks if disks is None or d in disks]
    for name in names:
        tracker.disks[name] = DiskChain()
    tracker.updated = now_rfc3339()
    repo.save_tracker(tracker)
    return names
