"""`diskferry image`: containerDisks in a registry — push, pull, inspect, list, delete."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from diskferry.cli.cancel import cancellable
from diskferry.cli.common import NOTES, note, print_json, progress_bar
from diskferry.cli.help_text import PlainTyper
from diskferry.cli.import_cmd import import_job, run_and_report
from diskferry.cli.network_options import Retries, Timeout, timeout_seconds
from diskferry.cli.registry_options import Authfile, Creds, Insecure, check_creds

image_app = PlainTyper(
    help="""containerDisk images in an OCI registry.

Disks kept in an OCI registry, or an OCI image layout directory, as KubeVirt containerDisks.
A reference is `docker://HOST[:PORT]/NAME[:TAG|@DIGEST]` or `oci:DIR[:TAG]`, as skopeo
writes them (a bare `docker://NAME[:TAG]` means Docker Hub). `push`, `pull`, `inspect` and
`diskferry import` take both; `list` and `delete` take registries.

\b
diskferry image push ./disk.vmdk docker://registry.example/vms/fedora:40
diskferry image pull docker://registry.example/vms/fedora:40 vm1.img --size 20G
diskferry import docker://127.0.0.1:5000/vms/fedora@sha256:9f2c... vm1.qcow2 --insecure
diskferry image inspect docker://registry.example/vms/fedora:40 --json
diskferry image list docker://registry.example/vms/fedora
diskferry image delete docker://registry.example/vms/fedora:40

Auth: anonymous, basic, or bearer tokens from the registry's token server (its
`WWW-Authenticate` challenge; a token is kept until it expires). Credentials come from
`--creds USER:PASS`, or from the `auths` of `--authfile FILE` (a Docker config; by default
`$REGISTRY_AUTH_FILE`, `$XDG_RUNTIME_DIR/containers/auth.json` or `~/.docker/config.json`).
`--ca-bundle FILE` trusts a private CA; `--insecure` speaks plain HTTP and is allowed only
for a registry on loopback.

Answers 5xx and 429 and broken connections are retried with backoff; the registry's errors
(`UNAUTHORIZED`, `DENIED`, `MANIFEST_UNKNOWN`, `BLOB_UNKNOWN`, `TOOMANYREQUESTS`) are one
line naming the image."""
)

Ref = Annotated[
    str, typer.Argument(help="docker://HOST[:PORT]/NAME[:TAG|@DIGEST] or oci:DIR[:TAG]")
]
CaBundle = Annotated[str | None, typer.Option(help="CA certificates (PEM).")]
NoProgress = Annotated[bool, typer.Option("--no-progress", help="Draw no progress bar.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _reference(text: str, *, layout: bool = False):
    """The parsed reference (oci:DIR[:TAG] too when `layout`); a malformed one is a usage error."""
    from diskferry.disk import is_layout_reference
    from diskferry.registry import BadReferenceError, parse_layout_reference, parse_reference

    try:
        if layout and is_layout_reference(text):
            return parse_layout_reference(text)
        return parse_reference(text)
    except BadReferenceError as e:
        raise typer.BadParameter(e.message, param_hint="REF") from e


def _client(
    ref: str,
    insecure: bool,
    creds: str | None,
    authfile: str | None,
    ca: str | None,
    retries: int,
    timeout: str,
):
    from diskferry.registry import RegistryClient, RegistryOptions, parse_creds

    check_creds(creds)
    parsed = _reference(ref)
    options = RegistryOptions(
        credentials=parse_creds(creds) if creds else None,
        authfile=authfile,
        ca_bundle=ca,
        insecure=insecure,
        retries=retries,
        timeout=timeout_seconds(timeout),
    )
    return RegistryClient.for_reference(parsed, options), parsed


@image_app.command("push")
def push_command(
    source: Annotated[str, typer.Argument(help="A local path, URL or docker:// reference.")],
    ref: Ref,
    format: Annotated[
        str | None, typer.Option("--format", help="raw or qcow2 (default: the source's).")
    ] = None,
    ca_bundle: CaBundle = None,
    header: Annotated[list[str] | None, typer.Option(help="'Name: value', repeatable.")] = None,
    insecure: Insecure = False,
    creds: Creds = None,
    authfile: Authfile = None,
    retries: Retries = 5,
    timeout: Timeout = "30s",
    no_progress: NoProgress = False,
    json_out: JsonOut = False,
) -> None:
    """Store a disk image as a containerDisk (raw or qcow2, one uncompressed tar layer).

    SOURCE is anything `diskferry import` takes. It is stored as one uncompressed tar layer
    (`application/vnd.oci.image.layer.v1.tar`) holding `disk/` and one file `disk/disk.img`
    (raw) or `disk/disk.qcow2`, owned by 107:107, with the OCI image config for
    linux/amd64: what KubeVirt runs. Raw and qcow2 sources keep their format, others become
    qcow2 (`--format raw|qcow2` chooses). The manifest's annotations
    `io.diskferry.disk.format`, `.name`, `.stored-size` and `.unpacked-size` record what was
    stored. A layer the registry has already is not sent again.
    """
    from diskferry.disk import Progress
    from diskferry.importer import push_image, stored_format

    _reference(ref, layout=True)
    job = import_job(
        source,
        "-",
        format=format or "raw",
        ca_bundle=ca_bundle,
        header=header,
        insecure=insecure,
        creds=creds,
        authfile=authfile,
        retries=retries,
        timeout=timeout,
    )
    job = job.model_copy(update={"format": stored_format(job, format)})
    progress = Progress()
    with (
        cancellable() as cancel,
        progress_bar(progress, "push", enabled=not no_progress and not json_out),
    ):
        result = push_image(job, ref, progress, cancel, NOTES)
    if json_out:
        print_json(result.to_json())
    else:
        note(f"pushed {result.format} ({result.unpacked_size} bytes) to {result.reference}")


@image_app.command("pull")
def pull_command(
    ref: Ref,
    target: Annotated[str, typer.Argument(help="The file or block device to write.")],
    format: Annotated[str, typer.Option("--format", help="raw or qcow2 (files only).")] = "raw",
    size: Annotated[str | None, typer.Option(help="Grow the result to SIZE.")] = None,
    ca_bundle: CaBundle = None,
    insecure: Insecure = False,
    creds: Creds = None,
    authfile: Authfile = None,
    retries: Retries = 5,
    timeout: Timeout = "30s",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing target.")] = False,
    no_progress: NoProgress = False,
    json_out: JsonOut = False,
) -> None:
    """Write a containerDisk into a volume, converted to its format and grown to --size.

    `image pull REF TARGET` and `import docker://REF TARGET` are one import: the layers
    stream (plain tar, gzip, zstd or xz), the disk is the one regular file directly under
    `disk/` (any owner: KubeVirt's 107 and Deckhouse's 64535 both import), then it is
    decompressed and converted like an HTTP import; a raw disk streams into a raw target
    without staging the layer. An index gives its linux/amd64 manifest. Every blob is
    checked against its digest as it streams, and the target is swapped in only after the
    whole image was read and checked; a broken blob read resumes with Range. An image with
    no disk under `disk/`, or with several, is refused with one line naming what was found.
    Progress counts layer bytes.
    """
    _reference(ref, layout=True)
    job = import_job(
        ref,
        target,
        format=format,
        size=size,
        ca_bundle=ca_bundle,
        insecure=insecure,
        creds=creds,
        authfile=authfile,
        retries=retries,
        timeout=timeout,
        force=force,
    )
    run_and_report(job, no_progress=no_progress, json_out=json_out)


@image_app.command("inspect")
def inspect_command(
    ref: Ref,
    ca_bundle: CaBundle = None,
    insecure: Insecure = False,
    creds: Creds = None,
    authfile: Authfile = None,
    retries: Retries = 5,
    timeout: Timeout = "30s",
    json_out: JsonOut = False,
) -> None:
    """Show an image's digest, platform, layers and annotations."""
    from diskferry.registry import Layout, describe, resolve

    if ref.startswith("oci:"):
        folder, tag = _reference(ref, layout=True)
        found = describe(Layout(folder).image(tag))
    else:
        client, parsed = _client(ref, insecure, creds, authfile, ca_bundle, retries, timeout)
        found = describe(resolve(client, parsed))
    if json_out:
        print_json(found)
        return
    for key, value in found.items():
        print(f"{key}: {value}")


@image_app.command("list")
def list_command(
    ref: Annotated[str, typer.Argument(help="docker://HOST[:PORT]/NAME")],
    ca_bundle: CaBundle = None,
    insecure: Insecure = False,
    creds: Creds = None,
    authfile: Authfile = None,
    retries: Retries = 5,
    timeout: Timeout = "30s",
    json_out: JsonOut = False,
) -> None:
    """List the tags of a repository."""
    from diskferry.registry import list_tags

    client, parsed = _client(ref, insecure, creds, authfile, ca_bundle, retries, timeout)
    tags = list_tags(client, parsed.repository)
    if json_out:
        print_json({"repository": parsed.repository, "tags": tags})
        return
    for tag in tags:
        print(tag)


@image_app.command("delete")
def delete_command(
    ref: Ref,
    ca_bundle: CaBundle = None,
    insecure: Insecure = False,
    creds: Creds = None,
    authfile: Authfile = None,
    retries: Retries = 5,
    timeout: Timeout = "30s",
) -> None:
    """Delete an image (its manifest, and so every tag naming it)."""
    from diskferry.registry import delete_manifest, get_manifest

    client, parsed = _client(ref, insecure, creds, authfile, ca_bundle, retries, timeout)
    digest = get_manifest(client, parsed.repository, parsed.reference).digest
    delete_manifest(client, parsed.repository, digest)
    note(f"deleted {parsed.registry}/{parsed.repository}@{digest}")


@image_app.command("serve")
def serve_command(
    root: Annotated[Path, typer.Argument(help="The store: one OCI layout per repository.")],
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 5000,
    token_file: Annotated[
        Path | None, typer.Option(help="A file holding the token clients give as password.")
    ] = None,
) -> None:
    """Serve the store as a registry (plain HTTP on 127.0.0.1) until SIGTERM or SIGINT.

    ROOT holds one OCI layout per repository; it is served with the distribution API, read
    and write, so skopeo and crane read and write it (clients give `--insecure`: the
    registry speaks plain HTTP). With a token file, clients log in with any user name and
    the token as password (Bearer tokens from `/token`).
    """
    from aiohttp import web

    from diskferry.registry import RegistryServer

    token = None
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as e:
            raise typer.BadParameter(f"cannot read {token_file}: {e.strerror}") from e
    root.mkdir(parents=True, exist_ok=True)
    note(f"serving {root} at http://127.0.0.1:{port}")
    web.run_app(RegistryServer(root, token).app(), host="127.0.0.1", port=port, print=None)


def register(app: typer.Typer) -> None:
    """Add `image` to the CLI."""
    app.add_typer(image_app, name="image")
