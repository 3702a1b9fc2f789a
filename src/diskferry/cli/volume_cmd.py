"""`diskferry volume serve|create|clone`: a volume over NBD, blank volumes, fast clones."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from diskferry.cli.cancel import cancellable
from diskferry.cli.common import note, print_json, progress_bar, size_option
from diskferry.cli.help_text import PlainTyper

volume_app = PlainTyper(
    help="""Volumes: serve one over NBD for a clone, create a blank one, clone one locally.

\b
# on the source host: serve the volume read-only until SIGTERM; prints its URL
diskferry volume serve /var/lib/disks/vm1.img --nbd 0.0.0.0:10809 [--cert-dir CA]
# on the target host: copy it into a volume
diskferry import nbd://source-host:10809/vm1.img /dev/vg0/vm1
diskferry volume create vm2.img --size 20G      # a sparse file
diskferry volume create /dev/vg0/vm3            # a block device zeroed with BLKZEROOUT
diskferry volume clone vm1.img vm1-copy.img     # a reflink where the file system shares extents

Wherever a command takes a volume path it also takes an NBD URL:

\b
nbd://HOST[:PORT]/NAME                 TCP, port 10809 by default; NAME may be empty
nbd+unix:///NAME?socket=PATH           Unix socket
nbds://HOST[:PORT]/NAME?tls-certificates=DIR[&tls-hostname=H][&tls-verify-peer=0]
nbds+unix:///NAME?socket=PATH&tls-certificates=DIR&tls-hostname=H

DIR holds `ca-cert.pem`, and `client-cert.pem` with `client-key.pem` when the server checks
clients (the layout of qemu's `tls-creds-x509`). The NBD client is diskferry's own:
structured replies, several meta contexts (`base:allocation`, `qemu:dirty-bitmap:NAME`,
`qemu:allocation-depth`), many requests in flight on one connection.

Only what the server says reads as zeros (`NBD_STATE_ZERO`) is skipped: a range reported as
a hole alone (unallocated, which over a backing file need not be zeros) is read like data.
A request left unanswered for 5 minutes fails with an error naming the server and the
command, and a server that breaks the protocol (a read reply that leaves bytes out, chunks
that overlap or fall outside the request, lengths past the protocol's limits) fails the job
instead of leaving bytes unread.

`diskferry import nbd://...` copies with the copy engine: holes and zero ranges that block
status reports are never read, blocks read as all zeros are not written, several requests
are in flight on one connection; the target is a prime file renamed over on success, so a
server that dies mid-clone leaves the target as it was. The result is raw (`--format qcow2`
and `--checksum`, which belong to stream imports, are refused); `--size` grows it.""",
    no_args_is_help=True,
)

JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
NoProgress = Annotated[bool, typer.Option("--no-progress", help="Draw no progress bar.")]
_ADDRESS = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]+))(?::(?P<port>\d{1,5}))?")
Force = Annotated[bool, typer.Option("--force", help="Replace a file that exists.")]


def parse_address(value: str) -> tuple[str, int]:
    """ADDRESS[:PORT] (an IPv6 address in brackets) as a host and port; 10809 by default."""
    from diskferry.nbd import DEFAULT_PORT

    match = _ADDRESS.fullmatch(value)
    port = int(match["port"] or DEFAULT_PORT) if match else -1
    if match is None or port > 65535:
        raise typer.BadParameter(f"{value!r} is not ADDRESS[:PORT]", param_hint="--nbd")
    return match["v6"] or match["host"], port


@volume_app.command("serve")
def serve_command(
    volume: Annotated[str, typer.Argument(help="The file or block device to serve.")],
    nbd: Annotated[
        str, typer.Option("--nbd", help="ADDRESS[:PORT] to listen on (port 0: any free one).")
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="The export's name (default: the volume's).")
    ] = None,
    format: Annotated[str, typer.Option("--format", help="raw or qcow2.")] = "raw",
    cert_dir: Annotated[
        str | None,
        typer.Option(
            "--cert-dir",
            help="Serve TLS only: a CA (ca.crt, ca.key) to issue the server's certificate, "
            "or ca-cert.pem, server-cert.pem, server-key.pem (qemu's layout).",
        ),
    ] = None,
    no_verify_clients: Annotated[
        bool,
        typer.Option("--no-verify-clients", help="With --cert-dir, take clients without a cert."),
    ] = False,
) -> None:
    """Serve VOLUME read-only over NBD until SIGTERM or SIGINT; prints its URL on stdout.

    Block status tells the client the holes and zeros, so a clone reads only data.

    It runs qemu-nbd on a socket diskferry binds first (port 0 picks a free one; the URL
    printed on stdout names it), read-only, any number of clients, with `base:allocation`
    and `qemu:allocation-depth` so that the client learns the holes. `--name` sets the
    export name (the volume's file name by default), `--format raw|qcow2` the volume's
    format. `--cert-dir DIR` serves TLS only: DIR is the project's CA (`ca.crt`, `ca.key`,
    as `diskferry export ca create` makes it), from which a server certificate for the
    address is issued at start, or a directory in qemu's layout (`ca-cert.pem`,
    `server-cert.pem`, `server-key.pem`). Clients must present a certificate the CA signed
    unless `--no-verify-clients`.
    """
    from diskferry.qemu import NbdServeOptions, NbdServer

    if format not in ("raw", "qcow2"):
        raise typer.BadParameter(f"format {format!r} is not raw or qcow2", param_hint="--format")
    host, port = parse_address(nbd)
    with contextlib.ExitStack() as stack:
        tls_dir = None if cert_dir is None else stack.enter_context(_qemu_tls_dir(cert_dir, host))
        options = NbdServeOptions(
            name=name if name is not None else os.path.basename(volume),
            fmt=format,
            tls_dir=tls_dir,
            verify_clients=not no_verify_clients,
        )
        server = stack.enter_context(NbdServer(volume, host, port, options))
        print(server.url, flush=True)
        note(f"serving {volume} read-only at {server.url}")
        server.wait()


@contextlib.contextmanager
def _qemu_tls_dir(cert_dir: str, host: str) -> Iterator[str]:
    """`cert_dir` if it is laid out for qemu; else a private one with a certificate its CA issued.

    The issued certificate names `host` besides the usual names; its directory is removed
    when the server ends.
    """
    from diskferry.serving import CA_CERT, default_sans, issue_server_cert

    if not os.path.exists(os.path.join(cert_dir, CA_CERT)):
        yield cert_dir
        return
    chain, key = issue_server_cert(cert_dir, list(dict.fromkeys([host, *default_sans()])))
    with tempfile.TemporaryDirectory(prefix="diskferry-nbd-tls-") as directory:
        shutil.copyfile(os.path.join(cert_dir, CA_CERT), os.path.join(directory, "ca-cert.pem"))
        Path(directory, "server-cert.pem").write_bytes(chain)
        fd = os.open(os.path.join(directory, "server-key.pem"), os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        yield directory


@volume_app.command("create")
def create_command(
    target: Annotated[str, typer.Argument(help="The file to create, or a block device.")],
    size: Annotated[
        str | None, typer.Option(help="Its size (a block device keeps its own).")
    ] = None,
    force: Force = False,
    no_progress: NoProgress = False,
    json_out: JsonOut = False,
) -> None:
    """Make TARGET a blank volume: a sparse file, or a block device zeroed (BLKZEROOUT).

    A file is created sparse at `--size` (an existing one is replaced only with `--force`);
    a block device keeps its size and is zeroed whole with BLKZEROOUT, which thin storage
    turns into freed blocks.
    """
    from diskferry.disk import Progress, create_blank

    _say_overwrite(target, "zeroes")
    progress = Progress()
    with (
        cancellable() as cancel,
        progress_bar(progress, "zero", enabled=not no_progress and not json_out),
    ):
        created = create_blank(
            target, size_option(size), replace=force, progress=progress, cancel=cancel
        )
    if json_out:
        print_json({"target": os.path.abspath(target), "size": created})
    else:
        note(f"created {target} blank, {created} bytes")


@volume_app.command("clone")
def clone_command(
    source: Annotated[str, typer.Argument(help="The volume to clone.")],
    destination: Annotated[str, typer.Argument(help="The new file, or a block device.")],
    force: Force = False,
    no_progress: NoProgress = False,
    json_out: JsonOut = False,
) -> None:
    """Clone SOURCE to DESTINATION: a reflink where the file system shares extents, else a copy.

    The clone is made with FICLONE where the file system shares extents (XFS made with
    `reflink=1`, btrfs): instant, no bytes copied. Elsewhere (ext4, across file systems,
    block devices) the copy engine copies what is allocated and keeps the holes. `--json`
    says which (`method`: `reflink` or `copy`).
    """
    from diskferry.disk import Progress, clone_volume

    _say_overwrite(destination, "overwrites")
    progress = Progress()
    with (
        cancellable() as cancel,
        progress_bar(progress, "clone", enabled=not no_progress and not json_out),
    ):
        result = clone_volume(source, destination, replace=force, progress=progress, cancel=cancel)
    if json_out:
        print_json(
            {
                "target": os.path.abspath(destination),
                "method": result.method,
                "size": result.size,
                "bytesRead": result.bytes_read,
                "bytesWritten": result.bytes_written,
            }
        )
    else:
        note(f"cloned {source} to {destination} by {result.method}, {result.size} bytes")


def _say_overwrite(path: str, verb: str) -> None:
    """Say before it starts that the command writes the block device `path` in place."""
    from diskferry.disk import is_block_device

    if is_block_device(path):
        note(f"this command {verb} the block device {path}")


def register(app: typer.Typer) -> None:
    """Add `volume` to the CLI."""
    app.add_typer(volume_app, name="volume")
