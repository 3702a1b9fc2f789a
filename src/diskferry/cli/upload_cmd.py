"""`diskferry upload FILE URL` (the client) and `diskferry upload serve TARGET` (the server)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from diskferry.cli.cancel import cancellable, signals_set
from diskferry.cli.common import build_job, note, print_json, progress_bar, size_option
from diskferry.cli.help_text import PlainTyper
from diskferry.cli.network_options import Retries, Timeout, timeout_seconds
from diskferry.cli.server_options import (
    Address,
    CertDir,
    Grace,
    HeaderTimeout,
    IdleTimeout,
    Port,
    Sans,
    ServingReporter,
    TlsSettingsFile,
    listening,
    serve_logging,
    timing_fields,
)
from diskferry.serving import DEFAULT_ADDRESS, EXPORT_PORT

_SEND = "send"


class _SendByDefault(TyperGroup):
    """`upload FILE URL` is `upload send FILE URL`: the first word names a command or a file."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        """Put `send` first when the first word is no command of the group."""
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = [_SEND, *args]
        return super().parse_args(ctx, args)


upload_app = PlainTyper(
    cls=_SendByDefault,
    help="""Upload a disk image to an upload server (FILE URL), or serve one (serve TARGET).

\b
curl --cacert ca.crt -H "Authorization: Bearer $TOKEN" --data-binary @disk.qcow2.gz \\
  https://host:8443/v1beta1/upload-async
curl --cacert ca.crt -H "Authorization: Bearer $TOKEN" -F file=@disk.qcow2 \\
  https://host:8443/v1beta1/upload-form
diskferry upload disk.qcow2.gz https://host:8443 --token-file token --ca-bundle ca.crt
diskferry upload disk.img https://host:8443/upload/$TOKEN --ca-bundle ca.crt""",
    no_args_is_help=True,
)


@upload_app.command(_SEND)
def upload_send(
    file: Annotated[Path, typer.Argument(help="The image to send (raw, qcow2, compressed...).")],
    url: Annotated[str, typer.Argument(help="https://HOST:PORT[/v1beta1/upload|/upload/SECRET]")],
    token_file: Annotated[
        Path | None, typer.Option(help="The bearer token (CDI's paths); first line.")
    ] = None,
    ca_bundle: Annotated[str | None, typer.Option(help="CA certificates (PEM).")] = None,
    retries: Retries = 5,
    timeout: Timeout = "30s",
    resume: Annotated[
        bool,
        typer.Option(help="Send a server that keeps partial uploads only what it lacks."),
    ] = True,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Draw no progress bar.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON result.")] = False,
) -> None:
    """Upload FILE to the upload server at URL; done once the server has imported it.

    FILE goes as the body of a POST (to `/v1beta1/upload` when URL names only the server)
    with a progress bar, and the command says what the server answered.
    """
    from diskferry.disk import Progress
    from diskferry.importer import upload_file

    progress = Progress()
    with (
        cancellable() as cancel,
        progress_bar(progress, "upload", enabled=not no_progress and not json_out),
    ):
        answer = upload_file(
            str(file),
            url,
            token_file=None if token_file is None else str(token_file),
            ca_bundle=ca_bundle,
            progress=progress,
            cancel=cancel,
            retries=retries,
            connect_timeout=timeout_seconds(timeout),
            resume=resume,
        )
    if json_out:
        print_json({"uploaded": str(file), "bytes": progress.done, "answer": answer})
    else:
        note(f"uploaded {file} ({progress.done} bytes): {answer}")


@upload_app.command("serve")
def upload_serve(
    target: Annotated[str, typer.Argument(help="The file or block device to write.")],
    token_file: Annotated[
        Path, typer.Option(help="The token (first line) and its RFC 3339 expiry (second).")
    ],
    cert_dir: CertDir,
    san: Sans = None,
    format: Annotated[str, typer.Option("--format", help="raw or qcow2 (files only).")] = "raw",
    size: Annotated[str | None, typer.Option(help="Grow the result to SIZE.")] = None,
    checksum: Annotated[str | None, typer.Option(help="ALGO:HEX of the uploaded stream.")] = None,
    address: Address = DEFAULT_ADDRESS,
    port: Port = EXPORT_PORT,
    keep_serving: Annotated[
        bool, typer.Option("--keep-serving", help="After the upload, answer 409 until stopped.")
    ] = False,
    grace: Grace = "10s",
    tls_settings: TlsSettingsFile = None,
    header_timeout: HeaderTimeout = "10s",
    idle_timeout: IdleTimeout = "60s",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON result.")] = False,
) -> None:
    """Take one upload into TARGET over HTTPS, on CDI's paths and Deckhouse's /upload/TOKEN.

    Waits for one upload over HTTPS (a certificate issued from the `ca.crt` in `--cert-dir`,
    or its `tls.crt`, as `export serve` takes them) and exits once it is in, printing the port
    first (`--keep-serving` answers 409 until stopped instead). The token file holds the
    token on its first line and, optionally, the RFC 3339 time it expires on the second; it
    is read for each upload.

    CDI's paths, POST only: `/v1beta1/upload` (the body is the image; 200 once the target
    is complete), `/v1beta1/upload-async` (200 once the bytes are in, the import goes on),
    `/v1beta1/upload-form` and `/v1beta1/upload-form-async` (multipart, the field `file`),
    the same under `/v1alpha1/`; HEAD on the async paths answers 200. The body is taken raw
    whatever its Content-Type. `Authorization: Bearer TOKEN`: missing or malformed 400,
    wrong or expired 401.

    Deckhouse's shape: PUT or POST on `/upload/TOKEN`, GET there 200 when ready; a wrong
    path is 404. The access log never shows the path's secret.

    One upload at a time (503 to another); after one succeeded, 409. The body streams
    through the import pipeline (decompression, format probe, conversion to `--format`,
    `--size`, the backing-file and size checks, `--checksum`) into a prime copy swapped in
    on success: a refused image (400) or a client that goes away leaves the target as it
    was and the server ready for the next upload.
    """
    from diskferry.disk import Progress
    from diskferry.importer import UploadJob, serve_upload

    if format not in ("raw", "qcow2"):
        raise typer.BadParameter(f"format {format!r} is not raw or qcow2", param_hint="--format")
    job = build_job(
        UploadJob,
        target=target,
        format=format,
        size=size_option(size),
        checksum=checksum,
        token_file=str(token_file),
        keep_serving=keep_serving,
        **listening(cert_dir, san, address, port, tls_settings),
        **timing_fields(header_timeout, idle_timeout, grace),
    )
    serve_logging()
    stop = threading.Event()
    with signals_set(stop):
        result = serve_upload(job, Progress(), stop, ServingReporter())
    if json_out:
        print_json(result.to_json())
    elif result.uploaded is not None:
        note(f"uploaded {result.uploaded['sourceFormat']} into {result.uploaded['target']}")
    else:
        note("stopped before an upload was complete")


def register(app: typer.Typer) -> None:
    """Add `upload` to the `diskferry` command."""
    app.add_typer(upload_app, name="upload")
