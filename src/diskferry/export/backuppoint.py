"""A backup point served for a client to pull: a VM's disks checkpointed in one backup session
(`diskferry.qemu.session`), each fleecing view served by an export server until its TTL, its
map showing what changed since the checkpoint it starts from (or what is allocated, for a full).

Before serving, the point's disks (checkpoint, full or incremental) go to `pointFile`. At
the TTL the session is left as a successful backup's is (the new checkpoints kept, the older
ones of the chain removed); a point stopped before its TTL leaves the older checkpoints too,
so that a checkpoint a caller still holds stays usable.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

from pydantic import Field

from diskferry.disk.progress import Progress
from diskferry.export.job import ExportJob, ExportVolumeSpec, ServeResult
from diskferry.export.service import serve_export, write_json
from diskferry.qemu.session import BackupSession, DiskExport, SessionDisk
from diskferry.worker.reporter import QUIET, Reporter


class BackupPointJob(ExportJob):
    """An export of a backup point: `volumes` are the disks (raw volumes with CBT, or their
    overlays); `chain` is the id the checkpoints' bitmap names carry; `since` the checkpoint
    an incremental starts from (a disk without it is served full)."""

    kind: Literal["backupPoint"] = "backupPoint"  # type: ignore[assignment]
    chain: str = Field(pattern=r"^[A-Za-z0-9]{1,64}$")
    since: str | None = None
    qmp: str | None = Field(default=None, description="QMP socket of the running VM")
    qga: str | None = Field(default=None, description="guest agent socket: freeze around it")
    point_file: str = Field(alias="pointFile", description="write the point's disks here (JSON)")
    session_timeout: float = Field(default=30.0, gt=0, alias="sessionTimeout")


class _Stopped(Exception):
    """The point was stopped before its TTL: its session is left as a failed one's."""

    def __init__(self, result: ServeResult) -> None:
        super().__init__("stopped before the TTL")
        self.result = result


def _usable(session: BackupSession, since: str | None) -> dict[str, str | None]:
    """Each disk's checkpoint to start from: `since` where the disk has it, consistent."""
    return {
        name: since
        for name, checkpoints in session.checkpoints.items()
        if since is not None and any(c.name == since and not c.inconsistent for c in checkpoints)
    }


def point_of(exports: list[DiskExport], consistency: str) -> dict[str, Any]:
    """What the point holds: each disk's new checkpoint and mode, and the point's type."""
    incremental = all(e.mode == "incremental" for e in exports)
    return {
        "type": "Incremental" if incremental else "Full",
        "consistency": consistency,
        "disks": [{"name": e.name, "checkpoint": e.checkpoint, "mode": e.mode} for e in exports],
    }


def serve_backup_point(
    job: BackupPointJob, progress: Progress, stop: threading.Event, reporter: Reporter = QUIET
) -> dict[str, Any]:
    """Checkpoint the disks, serve the point until its TTL or `stop`; the point and how it ended."""
    disks = [SessionDisk(v.name, v.path) for v in job.volumes]
    session = BackupSession(
        disks, job.chain, qmp_socket=job.qmp, qga_socket=job.qga, timeout=job.session_timeout
    )
    try:
        with session:
            exports = session.start(_usable(session, job.since))
            point = point_of(exports, session.consistency)
            write_json(job.point_file, point)
            volumes = [
                ExportVolumeSpec(
                    name=e.name,
                    path=e.url,
                    bitmap=e.bitmap,
                    data_file=e.data_file,
                    quiescent=e.quiescent,
                )
                for e in exports
            ]
            fleeced = job.model_copy(update={"volumes": volumes})
            served = serve_export(fleeced, progress, stop, reporter)
            if served.ended != "expired":
                raise _Stopped(served)
    except _Stopped as stopped:
        served = stopped.result
    return {**served.to_json(), **point}
