"""`diskferry repo init|check|stats|upgrade`, and `diskferry snapshots`, `forget` and `prune`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from diskferry.cli.cancel import cancellable
from diskferry.cli.common import NOTES, build_job, note, print_json, progress_bar, size_option
from diskferry.cli.help_text import PlainTyper
from diskferry.cli.password_prompt import prompt_if_needed

if TYPE_CHECKING:
    from diskferry.backup import RepoAccess, SnapshotInfo

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


def repo_access(
    url: str,
    password_file: str | None,
    endpoint: str | None,
    region: str | None,
    wait: bool = False,
    *,
    asks: int = 1,
) -> dict[str, Any]:
    """The fields every repository job has: where it is, its password file, its S3 settings.

    On a terminal, a password that nothing gives is asked `asks` times (0, 1, or 2: typed
    again to confirm it, for a new repository).
    """
    if asks:
        prompt_if_needed(password_file, twice=asks == 2)
    return {
        "repo": url,
        "password_file": password_file,
        "s3_endpoint": endpoint,
        "s3_region": region,
        "wait": wait,
    }


def open_access(
    url: str, password_file: str | None, endpoint: str | None, region: str | None
) -> RepoAccess:
    """The access to an existing repository that the flags give (its password asked if need be)."""
    from diskferry.backup import RepoAccess

    return RepoAccess(**repo_access(url, password_file, endpoint, region))


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
    """Make a new, empty backup repository.

    `--max-incrementals` is how many incrementals come before the next full (0 = no limit);
    `diskferry backup` takes it as its default. A `repo init` that fails (no password, a bad
    option, an existing repository) leaves no folder behind.
    """
    from diskferry.backup import InitJob, init_repository
    from diskferry.disk import Progress

    job = build_job(
        InitJob,
        chunk_size=size_option(chunk_size) or 0,
        max_incrementals=max_incrementals,
        encrypted=not no_encryption,
        **repo_access(repo, password_file, s3_endpoint, s3_region, asks=0 if no_encryption else 2),
    )
    with cancellable():
        result = init_repository(job, Progress())
    if json_out:
        print_json(result.to_json())
    else:
        note(f"created repository {result.repository} at {repo}")


def check_command(
    repo: RepoOpt,
    read_data: Annotated[
        bool, typer.Option("--read-data", help="Also read, open and verify every chunk.")
    ] = False,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Draw no progress bar.")
    ] = False,
    wait: WaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Check that every snapshot's chunks are indexed and stored (and intact, with --read-data).

    Verifies that every index entry points into an existing pack and every snapshot's
    chunks are indexed; `--read-data` also opens and verifies every chunk. It reports every
    problem it finds and goes on, a name the repository never writes and a symbolic link or
    special file in its folders among them (every other command refuses those). Damage
    exits 1 with a line naming the damaged objects and the snapshots they affect. `check`,
    `repo stats` and `prune` report the bytes of chunks no snapshot names that packs still
    hold, and how many packs hold them (`unusedBytes`, `packsWithUnused`).
    """
    from diskferry.backup import CheckFailedError, CheckJob, check_repository
    from diskferry.disk import Progress

    job = build_job(
        CheckJob,
        read_data=read_data,
        **repo_access(repo, password_file, s3_endpoint, s3_region, wait),
    )
    progress = Progress()
    with (
        cancellable() as cancel,
        progress_bar(progress, "check", enabled=read_data and not no_progress),
    ):
        report = check_repository(job, progress, cancel, NOTES)
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
    """Show what the repository holds: snapshots, chunks, packs, their sizes, unused bytes."""
    from diskferry.backup import unused_space
    from diskferry.disk import format_size

    with open_access(repo, password_file, s3_endpoint, s3_region).open_repository() as opened:
        stats = opened.stats()
        unused = unused_space(opened)
    stats |= {"unusedBytes": unused.bytes, "packsWithUnused": unused.packs}
    if json_out:
        print_json(stats)
        return
    for key, value in stats.items():
        shown = format_size(value) if key.endswith(("Bytes", "Size")) else value
        print(f"{key}: {shown}")


def upgrade_command(
    repo: RepoOpt,
    insecure_no_encryption: Annotated[
        bool,
        typer.Option(
            "--insecure-no-encryption",
            help="Upgrade a repository that says it is not encrypted (made with "
            "--no-encryption), with no password: its format-2 config cannot prove it.",
        ),
    ] = False,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    wait: WaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Bring a format-2 repository to format 3: its config authenticated under its keys.

    A repository of format 2, whose config carries no MAC, is taken with its password (the
    key file it opens must have the scrypt parameters the config gives new keys); under the
    exclusive lock, the same config is written with its MAC. A repository that says it is
    not encrypted is taken only with `--insecure-no-encryption` and no password, on a host
    that never opened it encrypted. A format-3 repository is left as it is.
    """
    from diskferry.backup import UpgradeJob, upgrade_repository
    from diskferry.disk import Progress

    job = build_job(
        UpgradeJob,
        insecure_no_encryption=insecure_no_encryption,
        **repo_access(
            repo,
            password_file,
            s3_endpoint,
            s3_region,
            wait,
            asks=0 if insecure_no_encryption else 1,
        ),
    )
    with cancellable() as cancel:
        result = upgrade_repository(job, Progress(), cancel, NOTES)
    if json_out:
        print_json(result.to_json())
    elif result.found_format == result.format:
        note(f"repository {result.repository} at {repo} is format {result.format}: nothing to do")
    else:
        under = (
            f"the keys that {result.key_file} holds"
            if result.encrypted
            else "its chunk-id key (it is not encrypted)"
        )
        note(
            f"upgraded repository {result.repository} at {repo} from format "
            f"{result.found_format} to format {result.format}: its config now carries a MAC "
            f"under {under}"
        )


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
        "job": info.job,
    }


def snapshots_command(
    repo: RepoOpt,
    vm: Annotated[str | None, typer.Option("--vm", help="Only this VM's snapshots.")] = None,
    backup: Annotated[
        str | None,
        typer.Option("--backup", help="Only the snapshots of this backup (the id backup prints)."),
    ] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", help="Only snapshots with this tag; repeated: with every one."),
    ] = None,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the snapshots, oldest first.

    A table of 80 columns, sizes as `1.5 GiB`; `--json` prints a list, oldest first, of
    `{id, backup, vm, disk, time, type, reason, parent, size, checkpoint, tags, job}`
    (`job`: the id of the worker job that made it, or null). `--backup ID` keeps the
    snapshots of the backup whose id `backup` printed; `--tag TAG` those with the tag
    (repeated: with every tag given).
    """
    with open_access(repo, password_file, s3_endpoint, s3_region).open_repository() as opened:
        found = [
            _snapshot_json(s)
            for s in opened.list_snapshots(vm)
            if (backup is None or s.backup == backup) and set(tag or []) <= set(s.tags)
        ]
    if json_out:
        print_json(found)
        return
    _print_snapshots(found)


def _print_snapshots(found: list[dict[str, Any]]) -> None:
    """The snapshots as a table of 80 columns (--json has every field)."""
    from diskferry.disk import format_size

    print(f"{'ID':16} {'TIME':16} {'VM/DISK':20} {'TYPE':4} {'SIZE':>9} TAGS")
    for s in found:
        when = str(s["time"])[:16].replace("T", " ")
        kind = "full" if s["type"] == "full" else "incr"
        where = _fit(f"{s['vm']}/{s['disk']}", 20)
        tags = _fit(",".join(s["tags"]), 9)
        print(f"{s['id']:16} {when:16} {where:20} {kind:4} {format_size(s['size']):>9} {tags}")


def _fit(text: str, width: int) -> str:
    """`text`, cut to `width` columns with `…` where it was cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


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
    """Forget snapshots by id or by a keep policy (their data goes at the next prune).

    Drops snapshots by id, or by a keep policy applied per VM and disk. Every snapshot is a
    synthetic full, so any point can be forgotten without breaking the others.
    """
    from diskferry.backup import ForgetJob, forget_snapshots
    from diskferry.disk import Progress

    job = build_job(
        ForgetJob,
        snapshots=snapshot_ids or [],
        keep_last=keep_last,
        keep_daily=keep_daily,
        keep_weekly=keep_weekly,
        vm=vm,
        **repo_access(repo, password_file, s3_endpoint, s3_region, wait),
    )
    with cancellable() as cancel:
        result = forget_snapshots(job, Progress(), cancel, NOTES)
    if json_out:
        print_json(result.to_json())
    else:
        for name in result.forgotten:
            note(f"forgot {name}")
        note(f"forgot {len(result.forgotten)} snapshots; run 'diskferry prune' to free their space")


def prune_command(
    repo: RepoOpt,
    repack_all: Annotated[
        bool,
        typer.Option("--repack-all", help="Repack every pack holding unused data, however little."),
    ] = False,
    password_file: PasswordFileOpt = None,
    s3_endpoint: EndpointOpt = None,
    s3_region: RegionOpt = None,
    wait: WaitOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Delete data no snapshot names; repack packs that are mostly unused.

    Deletes chunks no snapshot names and repacks packs at least half unused
    (`--repack-all`: every pack with an unused chunk), under an exclusive lock, safe to
    interrupt at any moment. It says what it freed and what unused data stays.
    """
    from diskferry.backup import PruneJob, Unused, prune_repository, unused_text
    from diskferry.disk import Progress, format_size

    job = build_job(
        PruneJob,
        repack_all=repack_all,
        **repo_access(repo, password_file, s3_endpoint, s3_region, wait),
    )
    with cancellable() as cancel:
        result = prune_repository(job, Progress(), cancel, NOTES)
    if json_out:
        print_json(result.to_json())
    else:
        note(
            f"removed {result.chunks_removed} chunks, deleted {result.packs_deleted} packs, "
            f"repacked {result.packs_repacked}; freed {format_size(result.bytes_freed)}; "
            f"{unused_text(Unused(result.unused_bytes, result.packs_with_unused))}"
            + (" (--repack-all reclaims it)" if result.unused_bytes else "")
        )


REPOSITORIES = """Make, check and measure backup repositories.

\b
diskferry repo init --repo URL [--chunk-size 1M] [--max-incrementals N] [--no-encryption]
diskferry backup --repo URL --vm NAME --disk NAME=PATH
diskferry snapshots --repo URL [--vm NAME] [--backup ID] [--tag TAG]... [--json]
diskferry restore SNAPSHOT TARGET --repo URL
diskferry forget --repo URL [ID...] [--keep-last N] [--keep-daily N] [--keep-weekly N]
diskferry prune --repo URL [--repack-all] [--wait] [--json]
diskferry repo check --repo URL [--read-data] [--wait] [--json]

A repository is a directory or `s3://bucket/prefix`; docs/repository-format.md gives its
every byte and what each crash leaves. Chunks (1 MiB by default, aligned to disk offsets)
are identified by a keyed BLAKE3 of their contents, compressed with zstd, sealed with
AES-256-GCM and packed; the data key is wrapped under scrypt of the password, which comes
from `DISKFERRY_PASSWORD` or `--password-file` (`--no-encryption` only compresses); when
neither gives it and stdin is a terminal, it is asked (twice at `repo init`). A key file
whose scrypt parameters ask for more than n = 2^20 (a power of two), r = 32, p = 16 or
1 GiB of memory (128·n·r) is refused, naming it, before anything is derived: no diskferry
writes one.

Every command takes `--password-file`, `--s3-endpoint` and `--s3-region`; S3 settings
otherwise come from `AWS_ENDPOINT_URL`, `AWS_REGION` / `AWS_DEFAULT_REGION`,
`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`. The index cache lives in
`$DISKFERRY_CACHE_DIR` or `~/.cache/diskferry/<repo-id>/` and can be deleted at any time.

Writes are ordered (packs, the index naming them, the snapshot, the tracker) and each
object is durable before anything naming it is written: on a directory it is written under
a temporary name (`.NAME.RANDOM.tmp`), fsynced, renamed into place and its directory
fsynced; on S3 it appears whole or not at all. A killed process or a power cut leaves a
repository that `check` passes. Temporary files are never listed as objects; those a
killed writer left are removed once an hour old.

Commands hold leases in `locks/` (5 minutes, renewed every minute; a holder on the same
host that is gone is taken over at once). A holder whose renewals have failed for half the
lease, or whose lock object was deleted (as a prune on another host does to a lease that
ran out), has lost its lock: it stops at its next repository operation with `diskferry:
error: lost the lock on URL ...` (reason `LockLost`) and writes nothing more. A renewal
never re-creates a lock that is gone. A job cancelled while it waits for a lock (`--wait`)
stops waiting at once and leaves no lock behind."""


def register(app: typer.Typer) -> None:
    """Add `repo` (init, check, stats, upgrade, key), `snapshots`, `forget` and `prune`."""
    repo_app = PlainTyper(name="repo", help=REPOSITORIES, no_args_is_help=True)
    repo_app.command("init")(init_command)
    repo_app.command("check")(check_command)
    repo_app.command("stats")(stats_command)
    repo_app.command("upgrade")(upgrade_command)
    from diskferry.cli.key_cmd import key_app  # it takes its options from this module

    repo_app.add_typer(key_app, name="key")
    app.add_typer(repo_app, name="repo")
    app.command("snapshots")(snapshots_command)
    app.command("forget")(forget_command)
    app.command("prune")(prune_command)
