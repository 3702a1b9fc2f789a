"""A VirtualMachineExport of a Pull VirtualMachineBackup, as KubeVirt serves a backup through an
export: the export starts no server of its own; it is routed through the export proxy to the
backup's point server and lists, as KubeVirt's `links.*.backups`, each volume's map and data
endpoints, behind the backup's token.

What the export needs of the backup: the backup, its point worker, the volumes the point
holds, the backup's token (the export's own `tokenSecretRef`, when it names one, must hold the
same token), and the VirtualMachine backed up; or why the export waits, or why it is Skipped
(a Push backup's data is in a repository, not served).
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass

from diskferry.control.reconcilers.disks.datasources import Waiting
from diskferry.control.reconcilers.exports.exporttoken import TOKEN_NOT_READY, Token, export_token
from diskferry.control.resources.vmbackup import ENDED, BackupMode, VirtualMachineBackup
from diskferry.control.resources.vmbackuptracker import (
    BackupSourceKind,
    VirtualMachineBackupTracker,
)
from diskferry.control.resources.vmexport import VirtualMachineExport
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.runner.base import Runner

POINT_FILE = "point.json"
"""Where a backup point's worker writes the point's disks, in its job directory."""


def point_job_id(backup: VirtualMachineBackup) -> str:
    """The id of a Pull backup's point worker."""
    return f"vmbackup-{backup.metadata.uid}"


@dataclass(frozen=True)
class Point:
    """A Pull backup's point being served: the backup, its worker, its volumes, its token and
    the VirtualMachine backed up."""

    backup: VirtualMachineBackup
    job_id: str
    volumes: list[str]
    token: Token
    vm_name: str


@dataclass(frozen=True)
class NotServed:
    """The backup's data is not served by an export, as `message` says."""

    message: str


def _vm_name(client: Client, backup: VirtualMachineBackup) -> str:
    source = backup.spec.source
    if source.kind is BackupSourceKind.VIRTUAL_MACHINE_BACKUP_TRACKER:
        tracker = client.get(VirtualMachineBackupTracker, backup.metadata.namespace, source.name)
        return "" if tracker is None else tracker.spec.source.name
    return source.name


def _token(
    client: Client, export: VirtualMachineExport, backup: VirtualMachineBackup
) -> Token | Waiting:
    """The backup's token, when the export names no token Secret or one holding the same."""
    token = export_token(client, backup)
    if isinstance(token, str):
        return Waiting(token, TOKEN_NOT_READY)
    named = export.spec.token_secret_ref
    if named is None or named == token.secret_name:
        return token
    own = export_token(client, export)
    if isinstance(own, str):
        return Waiting(own, TOKEN_NOT_READY)
    if not hmac.compare_digest(own.value, token.value):
        message = (
            f"the point of the VirtualMachineBackup {backup.metadata.name} is served with the "
            f"token of its Secret {token.secret_name}: name that Secret in spec.tokenSecretRef, "
            "or leave it unset"
        )
        return Waiting(message, TOKEN_NOT_READY)
    return own


def served_point(
    client: Client, runner: Runner, export: VirtualMachineExport
) -> Point | Waiting | NotServed:
    """The point the export of a VirtualMachineBackup serves, or why it waits or is Skipped."""
    name = export.spec.source.name
    backup = client.get(VirtualMachineBackup, export.metadata.namespace, name)
    if backup is None:
        return Waiting(f"waiting for the VirtualMachineBackup {name}: it does not exist")
    if backup.spec.mode is BackupMode.PUSH:
        return NotServed(
            f"the VirtualMachineBackup {name} is a Push backup: its data went into the repository "
            f"of the BackupStorageLocation {backup.spec.location}; an export serves the point "
            "of a Pull backup"
        )
    if backup.status.phase in ENDED:
        ended = backup.status.phase
        return Waiting(f"the VirtualMachineBackup {name} is {ended}: its point is no longer served")
    job_id = point_job_id(backup)
    state = runner.state(job_id)
    text = runner.read_file(job_id, POINT_FILE) if state is not None and state.running else None
    if text is None:
        return Waiting(f"waiting for the VirtualMachineBackup {name} to serve its point")
    token = _token(client, export, backup)
    if isinstance(token, Waiting):
        return token
    volumes = [disk["name"] for disk in json.loads(text)["disks"]]
    return Point(backup, job_id, volumes, token, _vm_name(client, backup))
