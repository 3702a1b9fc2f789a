"""`diskferry backup`, `diskferry restore` and `diskferry chain reset`."""

from __future__ import annotations

from typing import Annotated

import typer

from diskferry.cli.cancel import cancellable, target_left
from diskferry.cli.common import NOTES, build_job, note, print_json, progress_bar, size_option
from diskferry.cli.help_text import PlainTyper
from diskferry.cli.repo_cmd import (
    EndpointOpt,
    JsonOpt,
    PasswordFileOpt,
    RegionOpt,
    RepoOpt,
    WaitOpt,
    repo_access,
)

NoProgressOpt = Annotated[bool, typer.Option("--no-progress", help="Draw no progress bar.")]


def _disk(value: str) -> tuple[str, str]:
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise typer.BadParameter(f"{value!r} is not NAME=PATH", param_hint="--disk")
    return name, path


def backup_command(
    repo: RepoOpt,
    vm: Annotated[str, typer.Option("--vm", help="The VM whose disks these are.")],
    disk: Annotated[
        list[str],
        typer.Option(
            "--disk", help="NAME=PATH: a raw volume, its .cbt.qcow2 overlay, or an NBD URL."
        ),
    ],
    qmp: Annotated[
        str | None, typer.Option("--qmp", help="QMP socket of the running VM's QEMU.")
    ] = None,
    nbd_socket: Annotated[
        str | None,
        typer.Option("--nbd-socket", help="Unix socket of an NBD server that QEMU already runs."),
    ] = None,
    qga: Annotated[
        str | None, typer.Option("--qga", help="Guest agent socket: freeze filesystems.")
    ] = None,
    full: Annotated[bool, typer.Option("--full", help="Back up every disk in full.")] = False,
    max_incrementals: Annotated[
        int | None,
        typer.Option(min=0, help="Incrementals before a full (0 = no limit; default: repo's)."),
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="Tag the snapshots.")] = None,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    wait: WaitOpt = False,
    no_progress: NoProgressOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Back up a VM's disks: incremental where CBT allows, full where it must, saying why.

    All disks of the VM are taken in one QEMU transaction, so they are consistent with each
    other. PATH is a raw volume, its `.cbt.qcow2` overlay, or an NBD URL. With `--qmp` it
    backs up a running VM through its QEMU (image fleecing: the VM keeps writing, the backup
    sees one instant; `--nbd-socket` when that QEMU already runs an NBD server); without, it
    starts its own qemu-storage-daemon for the stopped disks. `--qga` freezes the guest's
    filesystems around the checkpoint; otherwise the output says the backup is
    crash-consistent.

    Each disk is incremental where CBT allows (only the dirty runs that the checkpoint
    bitmap names are read and uploaded) and full when there is no tracker, the chain is
    broken (checkpoint missing on the disk, snapshot missing in the repository, bitmap left
    inconsistent by a killed process), `--max-incrementals` is reached (default from `repo
    init`, 0 = no limit), or `--full` is given; the reason is printed. Without CBT every
    backup is full, skipping holes and zero blocks, and deduplication uploads only changed
    chunks; the output says how to turn CBT on (`diskferry cbt enable`). Every snapshot is a
    synthetic full: any point restores in one pass.

    A second backup of the same VM refuses, naming the holder (or waits with `--wait`). A
    killed backup leaves the repository consistent and loses no write: the next one reads
    the merge of every newer checkpoint bitmap. A `--disk` without CBT that holds an image
    format (qcow2, vmdk, vhd, vhdx, vdi) is refused, naming it: its container is not the
    disk; convert it to raw first.

    `--json` prints `{backup, consistency, disks: [{snapshot, type, reason, bytesRead,
    bytesNew, bytesUploaded, seconds}]}`.
    """
    from diskferry.backup import BackupJob, DiskSource

    job = build_job(
        BackupJob,
        vm=vm,
        disks=[DiskSource(name=n, path=p) for n, p in map(_disk, disk)],
        qmp=qmp,
        nbd_socket=nbd_socket,
        qga=qga,
        full=full,
        max_incrementals=max_incrementals,
        tags=tag or [],
        **repo_access(repo, password_file, s3_endpoint, s3_region, wait),
    )
    job.start_opening()
    from diskferry.backup import run_backup
    from diskferry.disk import Progress

    progress = Progress()
    left = "removed what it wrote: the repository is as it was"
    with (
        cancellable(left) as cancel,
        progress_bar(progress, f"backup {vm}", enabled=not no_progress),
    ):
        result = run_backup(job, progress, cancel, NOTES)
    for d in result.disks:
        if not d.cbt:
            note(f"disk {d.disk}: {d.reason}")
    if result.consistency == "crash-consistent":
        note("the backup is crash-consistent: give --qga to freeze the guest's filesystems")
    if json_out:
        print_json(result.to_json())
        return
    from diskferry.disk import format_size

    for d in result.disks:
        note(
            f"disk {d.disk}: snapshot {d.snapshot} ({d.type}), read {format_size(d.bytes_read)}, "
            f"{format_size(d.bytes_new)} new, uploaded {format_size(d.bytes_uploaded)} "
            f"in {d.seconds:.1f} s"
        )
    note(f"backup {result.backup} of VM {vm} done")


def restore_command(
    snapshot: Annotated[str, typer.Argument(help="A snapshot id, or 'latest' with --vm/--disk.")],
    target: Annotated[str, typer.Argument(help="The file or block device to write.")],
    repo: RepoOpt,
    vm: Annotated[str | None, typer.Option("--vm", help="The VM, for 'latest'.")] = None,
    disk: Annotated[str | None, typer.Option("--disk", help="The disk, for 'latest'.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="raw or qcow2.")] = "raw",
    size: Annotated[str | None, typer.Option("--size", help="Grow the disk to this size.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing target.")] = False,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    wait: WaitOpt = False,
    no_progress: NoProgressOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Restore a disk snapshot into a file or block device, in one pass.

    SNAPSHOT is a snapshot id (`diskferry snapshots`), or `latest` with `--vm` and `--disk`.
    It is written into a prime file that replaces TARGET only on success (`--force` to
    replace an existing one; over a CBT volume it also resets the chain, so the next backup
    is full). Zero runs stay holes; every chunk is verified before it is written; a damaged
    snapshot fails and leaves no target. Block devices are written in place. A `--size`
    smaller than the disk is refused.
    """
    from diskferry.backup import RestoreJob

    if fmt not in ("raw", "qcow2"):
        raise typer.BadParameter("use raw or qcow2", param_hint="--format")
    job = build_job(
        RestoreJob,
        snapshot=snapshot,
        target=target,
        vm=vm,
        disk=disk,
        format=fmt,
        size=size_option(size),
        force=force,
        **repo_access(repo, password_file, s3_endpoint, s3_region, wait),
    )
    job.start_opening()
    from diskferry.backup import run_restore
    from diskferry.disk import Progress

    progress = Progress()
    left = target_left(target)
    with cancellable(left) as cancel, progress_bar(progress, "restore", enabled=not no_progress):
        result = run_restore(job, progress, cancel, NOTES)
    if result.chain_reset:
        note(f"reset the CBT chain of {result.target}: its next backup is full")
    if json_out:
        print_json(result.to_json())
    else:
        note(f"restored snapshot {result.snapshot} into {result.target} ({result.format})")


def chain_reset_command(
    repo: RepoOpt,
    vm: Annotated[str, typer.Option("--vm", help="The VM whose chain to reset.")],
    disk: Annotated[
        list[str] | None, typer.Option("--disk", help="Only these disks (default: all).")
    ] = None,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    wait: WaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Forget a VM's checkpoints in the repository, so that its next backup is full.

    A VM (or a `--disk`) that nothing is tracked for is an error (exit 1: `nothing is
    tracked for VM NAME in this repository`), and nothing is reset, as restic's `forget`
    does with an id it does not know.
    """
    from diskferry.backup import ChainResetJob, reset_vm_chain
    from diskferry.disk import Progress

    job = build_job(
        ChainResetJob,
        vm=vm,
        disks=disk,
        **repo_access(repo, password_file, s3_endpoint, s3_region, wait),
    )
    with cancellable() as cancel:
        result = reset_vm_chain(job, Progress(), cancel, NOTES)
    if json_out:
        print_json(result.to_json())
    else:
        names = ", ".join(result.disks) or "no disks"
        note(f"reset the chain of VM {vm}: {names}; next backup is full")


def register(app: typer.Typer) -> None:
    """Add `backup`, `restore` and `chain reset`."""
    app.command("backup")(backup_command)
    app.command("restore")(restore_command)
    chain_app = PlainTyper(
        name="chain", help="Manage a VM's checkpoint chain.", no_args_is_help=True
    )
    chain_app.command("reset")(chain_reset_command)
    app.add_typer(chain_app, name="chain")
