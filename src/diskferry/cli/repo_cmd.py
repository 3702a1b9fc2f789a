"""`diskferry repo init|check|stats`, and `diskferry snapshots`, `forget` and `prune`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from diskferry.cli.common import note, print_json, progress_bar, size_option
from diskferry.disk.errors import DiskferryError

if TYPE_CHECKING:
    from diskferry.backup.job import RepoAccess
    from diskferry.backup.snapshots import SnapshotInfo

RepoOpt = Annotated[str, typer.Option("--repo", help="A directory or s3://bucket/prefix.")]
PasswordFileOpt = Annotated[
    str | None,
    typer.Option("--password-file", help="File whose first line is the password."),
]
EndpointOpt = Annotated[
    str | None, typer.Option("--s3-endpoint", help="S3 endpoint URL (else AWS_ENDPOINT_URL).")
]
RegionOpt = Annotated[str | None, typer.Option("--s3-region", help="S3 region (else AWS_REGION).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON result.")]
WaitOpt = Annotated[
    bool, typer.Option("--wait", help="Wait for a conflicting lock instead of refusing.")
]


class CheckFailedError(DiskferryError):
    """The repository check found damage."""

    reason = "CheckFailed"


def repo_access(
    url: str,
    password_file: str | None,
    endpoint: str | None,
    region: str | None,
    wait: bool = False,
) -> RepoAccess:
    """Where a command's repository is, and its password and S3 settings."""
    from diskferry.backup.job import RepoAccess

    return RepoAccess(
        repo=url, password_file=password_file, s3_endpoint=endpoint, s3_region=region, wait=wait
    )


def init_command(
    repo: RepoOpt,
    chunk_size: Annotated[str, typer.Option(help="Chunk size of full backups.")] = "1M",
    max_incrementals: Annotated[
        int, typer.Option(min=0, help="Incrementals before a full (0 = no limit).")
    ] = 0,
    no_encryption: Annotated[
        bool, typer.Option("--no-encryption", help="Compress but do not encrypt.")
    ] = False,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Make a new, empty backup repository."""
    from diskferry.backup.repository import Repository

    size = size_option(chunk_size) or 0
    if size < 4096 or size & (size - 1):
        raise typer.BadParameter("the chunk size must be a power of two, 4K or more")
    access = repo_access(repo, password_file, s3_endpoint, s3_region)
    password = None if no_encryption else access.password()
    with Repository.init(
        repo,
        password,
        chunk_size=size,
        max_incrementals=max_incrementals,
        encrypted=not no_encryption,
        s3=access.s3_options(),
    ) as made:
        result = {
            "repository": made.id,
            "url": made.url,
            "chunkSize": made.config.chunk_size,
            "encrypted": made.config.encrypted,
            "maxIncrementals": made.config.max_incrementals,
        }
    if json_out:
        print_json(result)
    else:
        note(f"created repository {result['repository']} at {repo}")


def check_command(
    repo: RepoOpt,
    read_data: Annotated[
        bool, typer.Option("--read-data", help="Also read, open and verify every chunk.")
    ] = False,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    no_progress: Annotated[bool, typer.Option("--no-progress")] = False,
    wait: WaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Check that every snapshot's chunks are indexed and stored (and intact, with --read-data)."""
    from diskferry.backup.check import check
    from diskferry.disk.progress import Progress

    access = repo_access(repo, password_file, s3_endpoint, s3_region, wait)
    with (
        access.open_repository() as opened,
        opened.lock("shared", "check", wait=access.lock_wait, notify=note),
    ):
        total = sum(info.size for info in opened.store.list("packs/")) if read_data else 0
        progress = Progress(total, "reading packs")
        with progress_bar(progress, "check", enabled=read_data and not no_progress):
            report = check(opened, read_data=read_data, on_pack=progress.add)
    if json_out:
        print_json(report.to_json())
    else:
        for problem in report.problems:
            note(problem.message)
    if not report.ok:
        raise CheckFailedError(report.summary())
    if not json_out:
        note(report.summary())


def stats_command(
    repo: RepoOpt,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show what the repository holds: snapshots, chunks, packs and their sizes."""
    from diskferry.disk.sizes import format_size

    with repo_access(repo, password_file, s3_endpoint, s3_region).open_repository() as opened:
        stats = opened.stats()
    if json_out:
        print_json(stats)
        return
    for key, value in stats.items():
        shown = format_size(value) if key.endswith("Bytes") else value
        print(f"{key}: {shown}")


def _snapshot_json(info: SnapshotInfo) -> dict[str, object]:
    return {
        "id": info.id,
        "backup": info.backup,
        "vm": info.vm,
        "disk": info.disk,
        "time": info.finished,
        "type": info.type,
        "reason": info.reason,
        "parent": info.parent,
        "size": info.disk_size,
        "checkpoint": info.checkpoint,
        "tags": info.tags,
    }


def snapshots_command(
    repo: RepoOpt,
    vm: Annotated[str | None, typer.Option("--vm", help="Only this VM's snapshots.")] = None,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the snapshots, oldest first."""
    with repo_access(repo, password_file, s3_endpoint, s3_region).open_repository() as opened:
        found = [_snapshot_json(s) for s in opened.list_snapshots(vm)]
    if json_out:
        print_json(found)
        return
    print(f"{'ID':18} {'TIME':21} {'VM/DISK':24} {'TYPE':12} {'SIZE':>14}  REASON")
    for s in found:
        where = f"{s['vm']}/{s['disk']}"
        print(
            f"{s['id']:18} {s['time']:21} {where:24} {s['type']:12} {s['size']:>14}  {s['reason']}"
        )


def forget_command(
    repo: RepoOpt,
    snapshot_ids: Annotated[
        list[str] | None, typer.Argument(help="Snapshot ids to forget.", show_default=False)
    ] = None,
    keep_last: Annotated[int, typer.Option(min=0, help="Keep the newest N per disk.")] = 0,
    keep_daily: Annotated[int, typer.Option(min=0, help="Keep one a day for N days.")] = 0,
    keep_weekly: Annotated[int, typer.Option(min=0, help="Keep one a week for N weeks.")] = 0,
    vm: Annotated[str | None, typer.Option("--vm", help="Apply the policy to this VM.")] = None,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    wait: WaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Forget snapshots by id or by a keep policy (their data goes at the next prune)."""
    from diskferry.backup.policy import to_forget

    policy = keep_last or keep_daily or keep_weekly
    if not snapshot_ids and not policy:
        raise typer.BadParameter("name snapshot ids, or a --keep-last/--keep-daily/--keep-weekly")
    access = repo_access(repo, password_file, s3_endpoint, s3_region, wait)
    with (
        access.open_repository() as opened,
        opened.lock("shared", "forget", wait=access.lock_wait, notify=note),
    ):
        ids = list(snapshot_ids or [])
        if policy:
            chosen = to_forget(opened.list_snapshots(vm), keep_last, keep_daily, keep_weekly)
            ids.extend(s.id for s in chosen if s.id not in ids)
        paths = opened.forget(ids)
    if json_out:
        print_json({"forgotten": [p.removeprefix("snapshots/") for p in paths]})
    else:
        for path in paths:
            note(f"forgot {path.removeprefix('snapshots/')}")
        note(f"forgot {len(paths)} snapshots; run 'diskferry prune' to free their space")


def prune_command(
    repo: RepoOpt,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    wait: WaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Delete data no snapshot names; repack packs that are mostly unused."""
    from dataclasses import asdict

    from diskferry.backup.prune import prune

    access = repo_access(repo, password_file, s3_endpoint, s3_region, wait)
    with access.open_repository() as opened:
        stats = prune(opened, wait=access.lock_wait, notify=note)
    if json_out:
        print_json({_camel(k): v for k, v in asdict(stats).items()})
    else:
        note(
            f"removed {stats.chunks_removed} chunks, deleted {stats.packs_deleted} packs, "
            f"repacked {stats.packs_repacked}; freed {stats.bytes_freed} bytes"
        )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def register(app: typer.Typer) -> None:
    """Add `repo` (init, check, stats), `snapshots`, `forget` and `prune`."""
    repo_app = typer.Typer(
        name="repo", help="Make, check and measure backup repositories.", no_args_is_help=True
    )
    repo_app.command("init")(init_command)
    repo_app.command("check")(check_command)
    repo_app.command("stats")(stats_command)
    app.add_typer(repo_app, name="repo")
    app.command("snapshots")(snapshots_command)
    app.command("forget")(forget_command)
    app.command("prune")(prune_command)
