"""The restore engine: one pass over a snapshot's entries into a prime target, swapped in last.

The manifest is read a page at a time, so memory stays flat however long it is, and the
chunks of a page are located in the index by one lookup ahead of the workers. Zero
entries stay holes; chunks are fetched, opened and verified in parallel threads,
each read once while a few recent ones are cached. Any failure removes the prime file,
so an existing target stays as it was (a block device is written in place, and said so).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterable, Iterator

from diskferry.backup.chunk_cache import ChunkCache
from diskferry.backup.entries import Entry
from diskferry.backup.errors import CorruptObjectError, SnapshotNotFoundError
from diskferry.backup.index import IndexEntry
from diskferry.backup.job import RestoreJob, RestoreResult
from diskferry.backup.phases import RestorePhase
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import Manifest
from diskferry.base.errors import BAD_USAGE, DiskferryError
from diskferry.disk.blocks import write_block, zero_range
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.parallel import parallel_map
from diskferry.disk.prime import Target, TargetError
from diskferry.disk.progress import Progress
from diskferry.disk.throttle import bucket_for, throttled
from diskferry.disk.volume import Volume
from diskferry.qemu import cbt, img
from diskferry.worker.reporter import QUIET, Reporter

RESTORE_THREADS = 8
CACHED_CHUNKS = 16
# entries written by one task at most (a task keeps to one chunk)
_TASK_ENTRIES = 256
# tasks whose chunks are located by one index lookup
_LOCATE_PAGE = 1024


def find_restore_point(repo: Repository, snapshot: str, vm: str | None, disk: str | None) -> str:
    """The manifest path of a snapshot id, or of the newest of a VM's disk for `latest`."""
    if snapshot != "latest":
        return repo.find_snapshot(snapshot)
    if not vm or not disk:
        raise SnapshotNotFoundError(
            "'latest' needs --vm and --disk to say whose snapshot", reason=BAD_USAGE
        )
    found = [s for s in repo.list_snapshots(vm) if s.disk == disk]
    if not found:
        raise SnapshotNotFoundError(f"no snapshot of disk {disk} of VM {vm} in {repo.url}")
    return found[-1].path


def _tasks(entries: Iterable[Entry]) -> Iterator[list[Entry]]:
    """Runs of neighbouring entries that read one chunk (or are all zeros)."""
    task: list[Entry] = []
    for entry in entries:
        if task and (task[-1].chunk != entry.chunk or len(task) >= _TASK_ENTRIES):
            yield task
            task = []
        task.append(entry)
    if task:
        yield task


def _located(
    repo: Repository, tasks: Iterable[list[Entry]]
) -> Iterator[tuple[list[Entry], IndexEntry | None]]:
    """Each task with where its chunk is stored (None for zeros), a page of tasks at a time."""
    pages = iter(tasks)
    while page := list(itertools.islice(pages, _LOCATE_PAGE)):
        where = repo.locate_chunks({t[0].chunk for t in page if t[0].chunk is not None})
        for task in page:
            chunk = task[0].chunk
            yield task, None if chunk is None else where[chunk]


def write_entries(
    repo: Repository,
    manifest: Manifest,
    volume: Volume,
    progress: Progress,
    cancel: threading.Event | None = None,
    *,
    zero_holes: bool,
) -> tuple[int, int]:
    """Write the manifest's entries into `volume`; bytes written and chunks read."""
    cache = ChunkCache(CACHED_CHUNKS)
    path = manifest.path

    def write(located: tuple[list[Entry], IndexEntry | None]) -> int:
        task, where = located
        if where is None:
            if zero_holes:
                for e in task:
                    zero_range(volume, e.offset, e.length, cancel)
            return 0
        chunk = where.chunk_id
        data = memoryview(cache.get(chunk, lambda: repo.read_located(where)))
        written = 0
        for e in task:
            if e.chunk_offset + e.length > len(data):
                raise CorruptObjectError(
                    f"{path} names bytes past the end of chunk {chunk.hex()[:16]}",
                    objects=(path,),
                )
            piece = data[e.chunk_offset : e.chunk_offset + e.length]
            # zeros inside a chunk stay holes too, unless the target cannot have holes
            written += write_block(
                volume, e.offset, piece, dst_zeroed=not zero_holes, cancel=cancel
            )
            progress.add(e.length)
        return written

    written = sum(
        parallel_map(
            write,
            _located(repo, _tasks(manifest.entries())),
            threads=RESTORE_THREADS,
            cancel=cancel,
        )
    )
    volume.flush()
    return written, cache.reads


def run_restore(
    job: RestoreJob,
    progress: Progress,
    cancel: threading.Event | None = None,
    reporter: Reporter = QUIET,
) -> RestoreResult:
    """Restore one snapshot into `job.target`; a file target is replaced only on success.

    A file target committed carries the job's id (see `Target.commit`).
    """
    clock = time.monotonic()
    progress.set_phase(RestorePhase.STARTING)
    path, tracked = cbt.overwrite_target(job.target, job.format)
    target = Target(path)
    exists = os.path.exists(target.path)
    if target.block_device and job.format != "raw":
        raise TargetError(f"{target.path} is a block device: it can only hold a raw disk")
    if exists and not job.force:
        raise TargetError(
            f"{target.path} exists: give --force to replace it", reason="TargetExists"
        )
    with (
        job.open_repository() as repo,
        repo.lock("shared", "restore", wait=job.lock_wait, notify=reporter.note, cancel=cancel),
    ):
        manifest = repo.load_snapshot(find_restore_point(repo, job.snapshot, job.vm, job.disk))
        info = manifest.info
        size = max(info.disk_size, job.size or 0)
        if job.size is not None and job.size < info.disk_size:
            raise TargetError(
                f"--size {job.size} is smaller than the disk of snapshot {info.id} "
                f"({info.disk_size} bytes)",
                reason="TargetTooSmall",
            )
        if target.block_device:
            target.check_fits(size)
            reporter.warn(
                "BlockDeviceInPlace", f"restore writes the block device {target.path} in place"
            )
        progress.set_total(manifest.data_bytes)
        progress.set_phase(RestorePhase.RESTORING)
        raw = target.scratch if job.format == "qcow2" else target.prime
        try:
            target.claim()
            if target.block_device:
                volume = FileVolume(target.path, writable=True, write_behind=True)
            else:
                volume = FileVolume.create(raw, size, write_behind=True)
            with throttled(volume, bucket_for(job.bandwidth_limit), cancel) as limited:
                written, chunks = write_entries(
                    repo, manifest, limited, progress, cancel, zero_holes=target.block_device
                )
            if job.format == "qcow2":
                progress.set_phase(RestorePhase.CONVERTING)
                img.convert(raw, target.prime, src_format="raw", dst_format="qcow2", cancel=cancel)
            # before the swap: a crash after it must not leave checkpoints that miss the restore
            chain_reset = tracked and cbt.reset_chain(target.path)
            target.commit(job.job_id)
        except DiskferryError as e:
            line = f"restore of snapshot {info.id} failed: {e.message}"
            if target.block_device:
                line += f"; the block device {target.path} is partly written"
            e.args = (line,)
            raise
        finally:
            target.discard()
    return RestoreResult(
        snapshot=info.id,
        target=target.path,
        format=job.format,
        size=size,
        bytes_written=written,
        chunks_read=chunks,
        chain_reset=chain_reset,
        seconds=round(time.monotonic() - clock, 3),
    )
