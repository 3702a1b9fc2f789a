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
    """Import a disk image (file, URL, containerDisk, NBD export) into a file or block device.

    \b
    diskferry import https://example.org/images/disk.qcow2.xz vm1.img
    diskferry import ./disk.vmdk vm1.qcow2 --format qcow2 --size 20G
    diskferry import https://mirror/disk.raw.gz /dev/vg0/vm1 --checksum sha256:3b0c...

    SOURCE is a local path, an http:// or https:// URL, a containerDisk (`docker://REF` or
    `oci:DIR[:TAG]`, as `diskferry image pull` takes it) or an NBD export (`nbd://`,
    `nbds://`, `nbd+unix://`; see `diskferry volume --help`). Compression (gzip, xz, zstd,
    bzip2) and format (raw, qcow2, vmdk, vhd, vhdx, vdi, iso) are sniffed from the first
    bytes. Raw images, compressed or not, stream straight into a raw target; other formats,
    and qcow2 targets, land in a sparse scratch file beside the target and go through
    `qemu-img convert`. Zero blocks are never written: the result is sparse. The result is
    raw unless `--format qcow2` (block devices are always raw); `--size` grows it, and a
    size less than the virtual size is refused.

    An xz image in several blocks, as `xz -T` writes it, is decoded a block per usable CPU
    (at most 160 MiB of blocks in flight), each block checked against its header and the
    stream's index; other xz images are decoded in one thread.

    A dropped connection resumes with a Range request where it broke (`--retries`, with
    backoff); a server without Range support is restarted only when nothing has been
    written yet.

    A file target is written as `TARGET.prime-XXXX`, fsynced and renamed over TARGET only
    on success: a failed or cancelled import leaves an existing target untouched and
    removes its prime and scratch files. A block device is written in place: the command
    says so before it starts, and reports it as partly written on failure.

    Refused with one line naming the problem: an image naming a backing file or an
    external data file, an encrypted image, a checksum mismatch, a virtual size larger
    than the block device or the free space, a decompressed stream growing past its
    declared size (a decompression bomb), a truncated stream, HTTP errors (with the
    status) and TLS verification failures; a target that is the source (the same file,
    through links, or its CBT overlay), even with `--force`; an HTML page (`Content-Type:
    text/html`) and a raw image whose size is not a multiple of 512, unless
    `--no-content-check`. An NBD source takes neither `--format qcow2` nor `--checksum`,
    which belong to stream imports.

    `--checksum` takes md5, sha1, sha256 or sha512 of the stream as received. `--json`
    prints one object at the end: `bytesRead`, `bytesWritten`, `seconds`, `averageSpeed`,
    `sourceFormat`, `compression`, `format`, `virtualSize`, `checksum`, `resumes`,
    `target` (and `digest`, the manifest's, for a containerDisk).
    """
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
    """Show an image's format, compression, virtual and allocated size, backing file.

    Of a local image or a URL: for a URL or a compressed file only the head is read;
    `qemu-img info` probes local files under CPU-time and address-space limits. `--json`
    prints one object.
    """
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
