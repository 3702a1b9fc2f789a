"""A backup session: checkpoint a VM's disks in one QMP transaction and export the frozen view.

Against a running QEMU (its QMP socket) or stopped disks (a qemu-storage-daemon of its
own). Opened, the session reports the repository's checkpoints on each disk; the caller
decides full or incremental from them and starts it. Then for each disk the session
adds a new checkpoint bitmap and disables the repository's older ones, all in one
transaction, and serves the point over NBD, with the merge of the checkpoint it was told
to start from and every newer one of the repository for an incremental. In a running
QEMU the guest goes on writing, so the same transaction starts image fleecing
(`blockdev-backup` sync none into a temporary qcow2 whose backing is the disk) and the
fleecing node is served; the session's own storage daemon holds its disks, nothing else
writes them, and the disk node itself is the point. Leaving it removes the temporary
export, job, node and files (a storage daemon of its own takes them with it when it
quits); on success it also removes the repository's checkpoints older than the new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from diskferry.base.errors import DiskferryError
from diskferry.qemu import bitmaps, cbt, img
from diskferry.qemu.bitmaps import Checkpoint
from diskferry.qemu.freeze import frozen
from diskferry.qemu.hostlock import HostLock
from diskferry.qemu.qmp import Qmp, QmpError
from diskferry.qemu.storage_daemon import DaemonDisk, StorageDaemon, runtime_dir

FLEECE_NODE = "diskferry-fleece-"
BACKUP_JOB = "diskferry-backup-"
EXPORT_ID = "diskferry-export-"
MERGED_BITMAP = "diskferry-merge"
# Beside the disk, on its filesystem: it grows with what the VM writes during the backup.
FLEECE_SUFFIX = ".fleece.qcow2"
_DISK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class SessionError(DiskferryError):
    """A backup session could not checkpoint or export a disk."""

    reason = "BackupSessionFailed"


@dataclass(frozen=True)
class SessionDisk:
    """A disk to back up: its name and path (raw volume or overlay).

    `overlay` is the path's CBT overlay when the caller has found it already (cbt.find).
    """

    name: str
    path: str
    overlay: str | None = None


@dataclass(frozen=True)
class DiskExport:
    """What the backup reads of one disk: the NBD URL, and the dirty bitmap for an incremental.

    `data_file` is the raw volume under the disk's overlay, of which a full backup skips
    the holes the fleecing file holds no copy of (see nbd/point_zeros.py). `quiescent`
    says that the session's own storage daemon holds the disk, so that nothing writes it
    while the export lives: the export is the disk itself, not a fleecing view, and the
    point's bytes and holes are the data file's.
    """

    name: str
    url: str
    size: int
    checkpoint: str
    mode: Literal["full", "incremental"]
    granularity: int | None = None
    bitmap: str | None = None
    checkpoints: list[Checkpoint] = field(default_factory=list)
    data_file: str | None = None
    quiescent: bool = False

    @property
    def meta_context(self) -> str | None:
        """The NBD meta context of the dirty extents (None for a full backup)."""
        return None if self.bitmap is None else f"qemu:dirty-bitmap:{self.bitmap}"


@dataclass
class _Disk:
    spec: SessionDisk
    index: int
    overlay: str
    node: str
    size: int
    checkpoints: list[Checkpoint]
    data_file: str | None
    new: str = ""
    mode: Literal["full", "incremental"] = "full"
    since: str | None = None
    merge: list[str] = field(default_factory=list)
    granularity: int | None = None

    @property
    def fleece_file(self) -> str:
        return self.overlay + FLEECE_SUFFIX

    @property
    def fleece(self) -> str:
        return f"{FLEECE_NODE}{self.index}"

    @property
    def job(self) -> str:
        return f"{BACKUP_JOB}{self.index}"

    @property
    def export(self) -> str:
        return f"{EXPORT_ID}{self.index}"


def _data_file(node: dict[str, Any], overlay: str) -> str | None:
    """The raw data file a qcow2 node reads its data from, as a path from here."""
    data = node["image"].get("format-specific", {}).get("data", {})
    name = data.get("data-file")
    if not name or not data.get("data-file-raw") or name.startswith("json:"):
        return None
    return os.path.join(os.path.dirname(overlay), name)


def _node_files(node: dict[str, Any]) -> set[str]:
    names = {node.get("file", ""), node.get("image", {}).get("filename", "")}
    return {os.path.realpath(n) for n in names if n and not n.startswith("json:")}


class BackupSession:
    """Checkpoint and export the disks of one VM for repository `repo_id`.

    With `qmp_socket` the disks are nodes of that running QEMU; `nbd_socket` names the
    NBD server it already runs, if any. Without `qmp_socket` the session serves the
    disks with a qemu-storage-daemon of its own. With `qga_socket` the guest's
    filesystems are frozen around the transaction. Entering opens the disks and returns
    the session, whose `checkpoints` say what each disk has; `start` then checkpoints and
    exports them as it is told. Leaving without an exception after `start` keeps only the
    new checkpoints.
    """

    def __init__(
        self,
        disks: list[SessionDisk],
        repo_id: str,
        *,
        qmp_socket: str | None = None,
        nbd_socket: str | None = None,
        qga_socket: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        if not disks:
            raise SessionError("a backup session needs at least one disk")
        for disk in disks:
            if not _DISK_NAME.match(disk.name):
                raise SessionError(
                    f"disk name {disk.name!r} is not 1 to 64 letters, digits, '.', '_' or '-'"
                )
        if len({d.name for d in disks}) != len(disks):
            raise SessionError("each disk of a backup session needs its own name")
        self.repo_id = bitmaps.check_repo_id(repo_id)
        self.specs = disks
        self.qmp_socket = qmp_socket
        self.nbd_socket = nbd_socket
        self.qga_socket = qga_socket
        self.timeout = timeout
        self.consistency = "filesystems frozen" if qga_socket else "crash-consistent"
        self.exports: list[DiskExport] = []
        self._daemon: StorageDaemon | None = None
        self._qmp: Qmp | None = None
        self._disks: list[_Disk] = []
        self._own_nbd_server = False
        self._sockets: Path | None = None
        self._lock: HostLock | None = None
        self._started = False

    @property
    def qmp(self) -> Qmp:
        """The monitor of the QEMU that serves the disks."""
        assert self._qmp is not None, "the session is not open"
        return self._qmp

    def __enter__(self) -> BackupSession:
        try:
            self._open()
        except BaseException:
            self._close(success=False)
            raise
        return self

    @property
    def checkpoints(self) -> dict[str, list[Checkpoint]]:
        """Each disk's checkpoints of the repository, oldest first, as its QEMU reports them."""
        return {
            d.spec.name: bitmaps.of_repository(d.checkpoints, self.repo_id) for d in self._disks
        }

    def start(self, since: Mapping[str, str | None]) -> list[DiskExport]:
        """Checkpoint the disks in one transaction and export them; one DiskExport per disk.

        A disk named in `since` with a checkpoint is exported for an incremental since that
        checkpoint (SessionError if it is not on the disk or it or a newer one is
        inconsistent); the others for a full backup.
        """
        assert self._disks and not self._started, "start once, inside the session"
        self._started = True
        for disk in self._disks:
            self._prepare(disk, since.get(disk.spec.name))
        if self._fleecing:
            self._add_fleecing_nodes()
        with frozen(self.qga_socket, self.timeout):
            self.qmp.command("transaction", actions=self._transaction())
        self._merge_bitmaps()
        self._export()
        return self.exports

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close(success=exc_type is None)

    @property
    def _fleecing(self) -> bool:
        """Whether the point needs fleecing: only while something else may write the disks."""
        return self._daemon is None

    def _open(self) -> None:
        overlays = [self._overlay(spec) for spec in self.specs]
        if self.qmp_socket is None:
            daemon_disks = [DaemonDisk(f"diskferry-disk{i}", o) for i, o in enumerate(overlays)]
            self._daemon = StorageDaemon(daemon_disks, timeout=self.timeout).start()
            self._qmp = self._daemon.qmp
            self.nbd_socket = self._daemon.nbd_socket
            monitor = self._daemon.qmp_socket
        else:
            monitor = os.path.realpath(self.qmp_socket)
            lock = runtime_dir() / f"session-{_key(monitor)}.lock"
            self._lock = HostLock(lock, f"the QEMU at {self.qmp_socket}").acquire()
            self._qmp = Qmp(self.qmp_socket, timeout=self.timeout)
        self._sockets = runtime_dir() / f"session-{_key(monitor)}"
        self._disks = self._find_nodes(overlays)
        self._remove_leftovers()
        self._sockets.mkdir(mode=0o700)

    def _overlay(self, spec: SessionDisk) -> str:
        if spec.overlay is not None:
            return spec.overlay
        disk = cbt.find(spec.path)
        if disk.overlay is None:
            raise SessionError(
                f"CBT is off on {disk.volume}: run 'diskferry cbt enable {disk.volume}' first"
            )
        return disk.overlay

    def _find_nodes(self, overlays: list[str]) -> list[_Disk]:
        nodes = self.qmp.command("query-named-block-nodes", flat=True)
        found = []
        for index, (spec, overlay) in enumerate(zip(self.specs, overlays, strict=True)):
            wanted = os.path.realpath(overlay)
            matches = [n for n in nodes if n.get("drv") == "qcow2" and wanted in _node_files(n)]
            if not matches:
                where = self.qmp_socket or "the storage daemon"
                raise SessionError(f"no block node of the QEMU at {where} opens {overlay}")
            node = matches[0]
            named = [b for b in node.get("dirty-bitmaps", []) if b.get("name")]
            found.append(
                _Disk(
                    spec=spec,
                    index=index,
                    overlay=overlay,
                    node=node["node-name"],
                    size=int(node["image"]["virtual-size"]),
                    checkpoints=[Checkpoint.from_qmp(b) for b in named],
                    data_file=_data_file(node, overlay),
                )
            )
        return found

    def _prepare(self, disk: _Disk, since: str | None) -> None:
        """Set what to merge for an incremental, drop broken checkpoints, name the new one."""
        mine = bitmaps.of_repository(disk.checkpoints, self.repo_id)
        if since is not None:
            newer = [c for c in mine if (c.seq or 0) >= _seq(since)]
            if not any(c.name == since for c in mine) or any(c.inconsistent for c in newer):
                raise SessionError(
                    f"checkpoint {since} of disk {disk.spec.name} is missing or inconsistent: "
                    "an incremental cannot start from it"
                )
            disk.mode, disk.since, disk.merge = "incremental", since, [c.name for c in newer]
        for broken in [c for c in mine if c.inconsistent]:
            self.qmp.command("block-dirty-bitmap-remove", node=disk.node, name=broken.name)
            disk.checkpoints.remove(broken)
        last = max((c.seq or 0 for c in mine), default=0)
        disk.new = bitmaps.checkpoint_name(self.repo_id, last + 1)

    def _add_fleecing_nodes(self) -> None:
        for disk in self._disks:
            create = ["create", "-q", "-f", "qcow2", disk.fleece_file, str(disk.size)]
            try:
                img.run(create, disk.fleece_file)
            except img.QemuImgError as e:
                raise SessionError(f"cannot create {disk.fleece_file}: {e.detail}") from e
            self.qmp.command(
                "blockdev-add",
                {
                    "driver": "qcow2",
                    "node-name": disk.fleece,
                    "file": {"driver": "file", "filename": disk.fleece_file},
                    "backing": disk.node,
                },
            )

    def _transaction(self) -> list[dict[str, Any]]:
        actions: list[dict[str, Any]] = []
        for disk in self._disks:
            node = disk.node
            actions.append(
                {
                    "type": "block-dirty-bitmap-add",
                    "data": {"node": node, "name": disk.new, "persistent": True},
                }
            )
            for old in bitmaps.of_repository(disk.checkpoints, self.repo_id):
                if old.enabled:
                    disable = {"node": node, "name": old.name}
                    actions.append({"type": "block-dirty-bitmap-disable", "data": disable})
            if self._fleecing:
                backup = {"job-id": disk.job, "device": node, "target": disk.fleece, "sync": "none"}
                actions.append({"type": "blockdev-backup", "data": backup})
        return actions

    def _merge_bitmaps(self) -> None:
        for disk in self._disks:
            if disk.mode != "incremental":
                continue
            disk.granularity = next(c.granularity for c in disk.checkpoints if c.name == disk.since)
            self.qmp.command(
                "block-dirty-bitmap-add",
                node=disk.node,
                name=MERGED_BITMAP,
                granularity=disk.granularity,
                persistent=False,
                disabled=True,
            )
            self.qmp.command(
                "block-dirty-bitmap-merge", node=disk.node, target=MERGED_BITMAP, bitmaps=disk.merge
            )

    def _export(self) -> None:
        assert self._sockets is not None
        if self.nbd_socket is None:
            self.nbd_socket = str(self._sockets / "nbd.sock")
            self.qmp.command(
                "nbd-server-start", addr={"type": "unix", "data": {"path": self.nbd_socket}}
            )
            self._own_nbd_server = True
        for disk in self._disks:
            args: dict[str, Any] = {
                "type": "nbd",
                "id": disk.export,
                "node-name": disk.fleece if self._fleecing else disk.node,
                "name": disk.spec.name,
                "writable": False,
                "allocation-depth": self._fleecing,
            }
            if disk.mode == "incremental":
                args["bitmaps"] = [MERGED_BITMAP]
            self.qmp.command("block-export-add", args)
            self.exports.append(
                DiskExport(
                    name=disk.spec.name,
                    url=f"nbd+unix:///{disk.spec.name}?socket={self.nbd_socket}",
                    size=disk.size,
                    checkpoint=disk.new,
                    mode=disk.mode,
                    granularity=disk.granularity,
                    bitmap=MERGED_BITMAP if disk.mode == "incremental" else None,
                    checkpoints=bitmaps.of_repository(disk.checkpoints, self.repo_id),
                    data_file=disk.data_file,
                    quiescent=self._daemon is not None,
                )
            )

    def _remove_leftovers(self) -> None:
        """Remove what a killed session left: temporaries, its NBD server, its files."""
        assert self._sockets is not None
        self._remove_temporaries()
        if self.qmp_socket is not None and (self._sockets / "nbd.sock").exists():
            with contextlib.suppress(QmpError):
                self.qmp.command("nbd-server-stop")
        shutil.rmtree(self._sockets, ignore_errors=True)

    def _remove_temporaries(self) -> None:
        """Remove every export, job, fleecing node and merged bitmap with a fixed name, and
        the fleecing files; in the session's own storage daemon, which holds none that it
        does not take with it when it quits, only the files."""
        if self._daemon is None:
            self._remove_temporary_nodes()
        for disk in self._disks:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(disk.fleece_file)

    def _remove_temporary_nodes(self) -> None:
        qmp = self.qmp
        for export in qmp.command("query-block-exports"):
            if export["id"].startswith(EXPORT_ID):
                qmp.clear_events()
                qmp.command("block-export-del", id=export["id"], mode="hard")
                qmp.wait_event("BLOCK_EXPORT_DELETED", self.timeout, id=export["id"])
        for job in qmp.command("query-block-jobs"):
            if job["device"].startswith(BACKUP_JOB):
                qmp.clear_events()
                qmp.command("block-job-cancel", device=job["device"], force=True)
                qmp.wait_event("BLOCK_JOB_CANCELLED", self.timeout, device=job["device"])
        for node in qmp.command("query-named-block-nodes", flat=True):
            name = node.get("node-name", "")
            if name.startswith(FLEECE_NODE):
                qmp.command("blockdev-del", node_name=name)
            if any(b.get("name") == MERGED_BITMAP for b in node.get("dirty-bitmaps", [])):
                qmp.command("block-dirty-bitmap-remove", node=name, name=MERGED_BITMAP)

    def _close(self, success: bool) -> None:
        errors: list[BaseException] = []

        def attempt(step: Callable[..., Any], *args: Any) -> None:
            try:
                step(*args)
            except (DiskferryError, OSError) as e:
                errors.append(e)

        if self._qmp is not None:
            attempt(self._remove_temporaries)
            if self._own_nbd_server:
                attempt(self.qmp.command, "nbd-server-stop")
            if success and self._started:
                attempt(self._drop_older_checkpoints)
        if self._sockets is not None:
            shutil.rmtree(self._sockets, ignore_errors=True)
        if self._daemon is not None:
            attempt(self._daemon.stop)
        elif self._qmp is not None:
            self._qmp.close()
        self._qmp = None
        if self._lock is not None:
            self._lock.release()
        if errors and success:
            raise SessionError(f"cleaning up the backup session: {errors[0]}") from errors[0]

    def _drop_older_checkpoints(self) -> None:
        for disk in self._disks:
            new_seq = _seq(disk.new)
            for old in bitmaps.of_repository(disk.checkpoints, self.repo_id):
                if (old.seq or 0) < new_seq:
                    self.qmp.command("block-dirty-bitmap-remove", node=disk.node, name=old.name)


def _key(monitor: str) -> str:
    return hashlib.sha256(monitor.encode()).hexdigest()[:16]


def _seq(name: str) -> int:
    return Checkpoint(name, 0, False).seq or 0
