"""`diskferry export` (serve, ca create, download) and `diskferry proxy serve`."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

import typer

from diskferry.cli.cancel import cancellable, signals_set, target_left
from diskferry.cli.common import (
    build_job,
    note,
    parse_headers,
    print_json,
    progress_bar,
)
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
    parse_duration,
    path_text,
    serve_logging,
    timing_fields,
)
from diskferry.serving import DEFAULT_ADDRESS, EXPORT_PORT

export_app = PlainTyper(help="Serve disks over HTTPS as KubeVirt exports, and download them.")
ca_app = PlainTyper(help="The CA that issues export server certificates.")
proxy_app = PlainTyper(help="The export proxy: one HTTPS entry that routes to export servers.")
export_app.add_typer(ca_app, name="ca")


@ca_app.command("create")
def ca_create(
    dir: Annotated[Path, typer.Option("--dir", help="Directory for ca.crt and ca.key.")],
) -> None:
    """Create a CA (ca.crt, ca.key) that export servers and the proxy issue certificates from."""
    from diskferry.serving import create_ca

    note(f"wrote {create_ca(dir)}")


@export_app.command("serve")
def export_serve(
    name: Annotated[str, typer.Option(help="The export's name.")],
    volume: Annotated[list[str], typer.Option(help="NAME=PATH: file, device, dir, nbd:// URL.")],
    token_file: Annotated[Path, typer.Option(help="File holding the token, read per request.")],
    cert_dir: CertDir,
    san: Sans = None,
    bitmap: Annotated[
        list[str] | None, typer.Option(help="VOLUME=BITMAP: the dirty bitmap of an NBD volume.")
    ] = None,
    address: Address = DEFAULT_ADDRESS,
    port: Port = EXPORT_PORT,
    ttl: Annotated[str, typer.Option(help="Lifetime; then 410, drain, exit 0.")] = "2h",
    grace: Grace = "60s",
    manifest: Annotated[Path | None, typer.Option(help="The VM manifest (YAML).")] = None,
    links_json: Annotated[Path | None, typer.Option(help="Write the status links here.")] = None,
    internal_url: Annotated[str | None, typer.Option(help="Base URL inside the cluster.")] = None,
    external_url: Annotated[str | None, typer.Option(help="Base URL through the proxy.")] = None,
    external_ca: Annotated[
        Path | None, typer.Option(help="CA (PEM) of the external URL; default: this server's.")
    ] = None,
    unix_socket: Annotated[
        Path | None,
        typer.Option(help="Also serve plain HTTP on this Unix socket, for a proxy on this host."),
    ] = None,
    tls_settings: TlsSettingsFile = None,
    header_timeout: HeaderTimeout = "10s",
    idle_timeout: IdleTimeout = "60s",
) -> None:
    """Serve one export's volumes over HTTPS with KubeVirt's paths, until its TTL."""
    from diskferry.disk import Progress
    from diskferry.export import (
        ExportJob,
        ExportVolumeSpec,
        LinkSettings,
        parse_volume_spec,
        serve_export,
    )

    if links_json is not None and not (internal_url and external_url):
        raise typer.BadParameter("--links-json needs --internal-url and --external-url")
    timing = timing_fields(header_timeout, idle_timeout, grace)
    lifetime = parse_duration(ttl)
    specs = [parse_volume_spec(v) for v in volume]
    bitmaps = dict(parse_volume_spec(b) for b in bitmap or [])
    if not bitmaps.keys() <= {n for n, _ in specs}:
        raise typer.BadParameter("--bitmap names a volume that no --volume gives")
    links = None
    if internal_url and external_url:
        links = LinkSettings(
            internal_url=internal_url,
            external_url=external_url,
            external_ca=path_text(external_ca),
            file=path_text(links_json),
        )
    job = build_job(
        ExportJob,
        name=name,
        volumes=[ExportVolumeSpec(name=n, path=p, bitmap=bitmaps.get(n)) for n, p in specs],
        token_file=str(token_file),
        ttl=lifetime,
        manifest=path_text(manifest),
        links=links,
        unix_socket=path_text(unix_socket),
        **listening(cert_dir, san, address, port, tls_settings),
        **timing,
    )
    serve_logging()
    stop = threading.Event()
    with signals_set(stop):
        serve_export(job, Progress(), stop, ServingReporter())


@export_app.command("download")
def export_download(
    url: Annotated[str, typer.Argument(help="A volume's disk.img URL (direct or via the proxy).")],
    target: Annotated[Path, typer.Argument(help="The raw file or block device to write.")],
    token: Annotated[str | None, typer.Option(help="The export token.")] = None,
    token_file: Annotated[Path | None, typer.Option(help="File holding the export token.")] = None,
    ca_bundle: Annotated[str | None, typer.Option(help="CA certificates (PEM).")] = None,
    header: Annotated[list[str] | None, typer.Option(help="'Name: value', repeatable.")] = None,
    encoding: Annotated[str, typer.Option(help="raw, gzip or zstd.")] = "raw",
    connections: Annotated[int, typer.Option(help="Parallel connections (raw).")] = 4,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing target.")] = False,
    retries: Retries = 5,
    timeout: Timeout = "30s",
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Draw no progress bar.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON result.")] = False,
) -> None:
    """Download a volume into a raw file: only allocated ranges, resuming after breaks."""
    from diskferry.disk import Progress, is_block_device
    from diskferry.export import DownloadRequest, download_volume

    if encoding not in ("raw", "gzip", "zstd"):
        raise typer.BadParameter(f"{encoding!r} is not raw, gzip or zstd", param_hint="--encoding")
    if token is not None and token_file is not None:
        raise typer.BadParameter("give --token or --token-file, not both")
    if not 1 <= connections <= 16:
        raise typer.BadParameter("give 1 to 16", param_hint="--connections")
    if token is not None:
        note(
            "warning: a token on the command line is visible to other users of this machine; "
            "give it with --token-file"
        )
    if token_file is not None:
        from diskferry.export import TokenFile

        token = TokenFile(token_file).read()
    req = DownloadRequest(
        url=url,
        target=target,
        force=force,
        token=token,
        ca_bundle=ca_bundle,
        headers=parse_headers(header),
        encoding=encoding,  # type: ignore[arg-type]
        connections=connections,
        retries=retries,
        timeout=timeout_seconds(timeout),
    )
    if is_block_device(target):
        note(f"overwriting block device {target}; on failure it is left partly written")
    progress = Progress()
    with (
        cancellable(target_left(str(target))) as cancel,
        progress_bar(progress, "download", enabled=not no_progress and not json_out),
    ):
        result = download_volume(req, progress, cancel)
    if json_out:
        print_json(result.to_json())
    else:
        how = "allocated ranges" if result.sparse_map else result.encoding
        note(
            f"downloaded {result.size} bytes into {result.target} ({how}, "
            f"{result.bytes_fetched} bytes fetched) in {result.seconds:.1f} s"
        )


@proxy_app.command("serve")
def proxy_serve(
    routes: Annotated[Path, typer.Option(help="Routes file (YAML), reloaded on change.")],
    cert_dir: CertDir,
    san: Sans = None,
    address: Address = DEFAULT_ADDRESS,
    port: Port = EXPORT_PORT,
    tls_settings: TlsSettingsFile = None,
    header_timeout: HeaderTimeout = "10s",
    idle_timeout: IdleTimeout = "60s",
    backend_idle_timeout: Annotated[
        str, typer.Option(help="Idle pooled backend connections close after this.")
    ] = "30s",
    grace: Grace = "10s",
    processes: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=64,
            help="Processes accepting on the port (default: one per usable CPU, at most 4).",
        ),
    ] = None,
) -> None:
    """Route /api/export.kubevirt.io/... requests to the export servers in the routes file."""
    from diskferry.disk import Progress
    from diskferry.export import ProxyJob, serve_proxy

    job = build_job(
        ProxyJob,
        routes=str(routes),
        backend_idle_timeout=parse_duration(backend_idle_timeout),
        **({} if processes is None else {"processes": processes}),
        **listening(cert_dir, san, address, port, tls_settings),
        **timing_fields(header_timeout, idle_timeout, grace),
    )
    serve_logging()
    stop = threading.Event()
    with signals_set(stop):
        serve_proxy(job, Progress(), stop, ServingReporter())


def register(app: typer.Typer) -> None:
    """Add `export` and `proxy` to the `diskferry` command."""
    app.add_typer(export_app, name="export")
    app.add_typer(proxy_app, name="proxy")
