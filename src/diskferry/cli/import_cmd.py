"""`diskferry import` and `diskferry info`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from diskferry.cli.cancel import cancellable, target_left
from diskferry.cli.common import (
    NOTES,
    build_job,
    note,
    parse_headers,
    print_json,
    progress_bar,
    size_option,
)
from diskferry.cli.network_options import Retries, Timeout, timeout_seconds
from diskferry.cli.registry_options import Authfile, Creds, Insecure, check_creds

if TYPE_CHECKING:
    from diskferry.importer import ImportJob


def import_command(
    source: Annotated[
        str,
        typer.Argument(help="A local path, an http(s):// URL, a docker:// reference or nbd[s]://."),
    ],
    target: Annotated[str, typer.Argument(help="The file or block device to write.")],
    format: Annotated[str, typer.Option("--format", help="raw or qcow2 (files only).")] = "raw",
    size: Annotated[str | None, typer.Option(help="Grow the result to SIZE.")] = None,
    checksum: Annotated[str | None, typer.Option(help="ALGO:HEX of the source stream.")] = None,
    ca_bundle: Annotated[str | None, typer.Option(help="CA certificates (PEM).")] = None,
    header: Annotated[list[str] | None, typer.Option(help="'Name: value', repeatable.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing target.")] = False,
    no_content_check: Annotated[
        bool,
        typer.Option(
            "--no-content-check",
            help="Import an HTML page, or a raw image that is not whole 512-byte sectors.",
        ),
    ] = False,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Draw no progress bar.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON result.")] = False,
    insecure: Insecure = False,
    creds: Creds = None,
    authfile: Authfile = None,
    retries: Retries = 5,
    timeout: Timeout = "30s",
) -> None:
    """Import a disk image (file, URL, containerDisk, NBD export) into a file or block device."""
    job = import_job(
        source,
        target,
        format=format,
        size=size,
        checksum=checksum,
        ca_bundle=ca_bundle,
        header=header,
        insecure=insecure,
        creds=creds,
        authfile=authfile,
        retries=retries,
        timeout=timeout,
        force=force,
        content_check=not no_content_check,
    )
    run_and_report(job, no_progress=no_progress, json_out=json_out)


def import_job(
    source: str,
    target: str,
    *,
    format: str = "raw",
    size: str | None = None,
    checksum: str | None = None,
    ca_bundle: str | None = None,
    header: list[str] | None = None,
    insecure: bool = False,
    creds: str | None = None,
    authfile: str | None = None,
    retries: int = 5,
    timeout: str = "30s",
    force: bool = False,
    content_check: bool = True,
) -> ImportJob:
    """The import job of a command's flags, checked."""
    from diskferry.importer import ImportJob

    if format not in ("raw", "qcow2"):
        raise typer.BadParameter(f"format {format!r} is not raw or qcow2", param_hint="--format")
    if checksum is not None:
        _check_checksum(checksum)
    check_creds(creds)
    return build_job(
        ImportJob,
        source=source,
        target=target,
        format=format,
        size=size_option(size),
        checksum=checksum,
        ca_bundle=ca_bundle,
        headers=parse_headers(header),
        insecure=insecure,
        creds=creds,
        authfile=authfile,
        retries=retries,
        timeout=timeout_seconds(timeout),
        force=force,
        contentCheck=content_check,
    )


def run_and_report(job: ImportJob, *, no_progress: bool, json_out: bool) -> None:
    """Run the import with a progress bar; print its result."""
    from diskferry.disk import Progress
    from diskferry.importer import run_import

    progress = Progress()
    with (
        cancellable(target_left(job.target)) as cancel,
        progress_bar(progress, "import", enabled=not no_progress and not json_out),
    ):
        result = run_import(job, progress, cancel, NOTES)
    if json_out:
        print_json(result.to_json())
    else:
        from diskferry.disk import format_size

        note(
            f"imported {result.source_format}"
            f"{'+' + result.compression if result.compression else ''} into {result.target} "
            f"({result.format}, {format_size(result.virtual_size)}) in {result.seconds:.1f} s"
            f"{' from ' + result.digest if result.digest else ''}"
        )


def _check_checksum(spec: str) -> None:
    from diskferry.disk import Checksum, ChecksumError

    try:
        Checksum(spec)
    except ChecksumError as e:
        raise typer.BadParameter(e.message, param_hint="--checksum") from e


def info_command(
    image: Annotated[str, typer.Argument(help="A local path or an http(s):// URL.")],
    ca_bundle: Annotated[str | None, typer.Option(help="CA certificates (PEM).")] = None,
    header: Annotated[list[str] | None, typer.Option(help="'Name: value', repeatable.")] = None,
    retries: Retries = 5,
    timeout: Timeout = "30s",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show an image's format, compression, virtual and allocated size, backing file."""
    from diskferry.importer import probe_image

    found = probe_image(
        image,
        ca_bundle=ca_bundle,
        headers=parse_headers(header),
        retries=retries,
        timeout=timeout_seconds(timeout),
    )
    if json_out:
        print_json(found)
        return
    from diskferry.disk import format_size

    for key, value in found.items():
        shown = format_size(value) if key.endswith("Size") and isinstance(value, int) else value
        print(f"{key}: {shown if shown is not None else '-'}")


def register(app: typer.Typer) -> None:
    """Add `import` and `info` to the CLI."""
    app.command("import")(import_command)
    app.command("info")(info_command)
