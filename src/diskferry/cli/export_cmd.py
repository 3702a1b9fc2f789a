"""`diskferry export` (serve, ca create, download) and `diskferry proxy serve`."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from diskferry.cli.common import note, parse_headers, print_json, progress_bar

if TYPE_CHECKING:
    from diskferry.export.serve import ServeOptions

export_app = typer.Typer(help="Serve disks over HTTPS as KubeVirt exports, and download them.")
ca_app = typer.Typer(help="The CA that issues export server certificates.")
proxy_app = typer.Typer(help="The export proxy: one HTTPS entry that routes to export servers.")
export_app.add_typer(ca_app, name="ca")

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def parse_duration(text: str) -> float:
    """Seconds in '2h', '90m', '1h30m', '45s' or '45'."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise typer.BadParameter(f"cannot read duration {text!r}: use e.g. 2h, 30m, 45s")
    h, m, s = (float(g) if g else 0.0 for g in match.groups())
    return h * 3600 + m * 60 + s


def _logging() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )


def _announce(what: str, host: str) -> Callable[[int], None]:
    def on_listening(port: int) -> None:
        print(port, flush=True)
        note(f"{what} listening on https://{host}:{port}")

    return on_listening


def _read_pem(path: Path) -> str:
    from diskferry.export.errors import ExportError

    try:
        return path.read_text()
    except OSError as e:
        raise ExportError(f"cannot read {path}: {e.strerror}") from e


def _write_json(path: Path, obj: object) -> None:
    from diskferry.export.errors import ExportError

    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ExportError(f"cannot write {path}: {e.strerror}") from e


CertDir = Annotated[Path, typer.Option("--cert-dir", help="tls.crt/tls.key, or a CA to issue.")]
Sans = Annotated[list[str] | None, typer.Option("--san", help="Certificate name, repeatable.")]
Address = Annotated[str, typer.Option("--address", help="Address to listen on.")]
Port = Annotated[int, typer.Option("--port", help="Port; 0 picks a free one and prints it.")]
TlsSettingsFile = Annotated[Path | None, typer.Option("--tls-settings", help="TLS settings YAML.")]
HeaderTimeout = Annotated[str, typer.Option("--header-timeout", help="Limit for request headers.")]
IdleTimeout = Annotated[str, typer.Option("--idle-timeout", help="Idle keep-alive limit.")]
Grace = Annotated[str, typer.Option("--grace", help="How long transfers may finish at the end.")]


@ca_app.command("create")
def ca_create(
    dir: Annotated[Path, typer.Option("--dir", help="Directory for ca.crt and ca.key.")],
) -> None:
    """Create a CA (ca.crt, ca.key) that export servers and the proxy issue certificates from."""
    from diskferry.export.certs import create_ca

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
    address: Address = "0.0.0.0",
    port: Port = 8443,
    ttl: Annotated[str, typer.Option(help="Lifetime; then 410, drain, exit 0.")] = "2h",
    grace: Grace = "60s",
    manifest: Annotated[Path | None, typer.Option(help="The VM manifest (YAML).")] = None,
    links_json: Annotated[Path | None, typer.Option(help="Write the status links here.")] = None,
    internal_url: Annotated[str | None, typer.Option(help="Base URL inside the cluster.")] = None,
    external_url: Annotated[str | None, typer.Option(help="Base URL through the proxy.")] = None,
    external_ca: Annotated[
        Path | None, typer.Option(help="CA (PEM) of the external URL; default: this server's.")
    ] = None,
    tls_settings: TlsSettingsFile = None,
    header_timeout: HeaderTimeout = "10s",
    idle_timeout: IdleTimeout = "60s",
) -> None:
    """Serve one export's volumes over HTTPS with KubeVirt's paths, until its TTL."""
    from diskferry.export.certs import default_sans
    from diskferry.export.links import export_links
    from diskferry.export.manifests import load_manifest
    from diskferry.export.serve import run
    from diskferry.export.server import ExportServer
    from diskferry.export.tls import ServerTls
    from diskferry.export.token import TokenFile
    from diskferry.export.volumes import ExportedVolume, open_exported, parse_spec

    if links_json is not None and not (internal_url and external_url):
        raise typer.BadParameter("--links-json needs --internal-url and --external-url")
    opts = _serve_options(address, port, header_timeout, idle_timeout, grace, ttl)
    specs = [parse_spec(v) for v in volume]
    if len({n for n, _ in specs}) != len(specs):
        raise typer.BadParameter("two --volume options have the same name")
    bitmaps = dict(parse_spec(b) for b in bitmap or [])
    if not bitmaps.keys() <= {n for n, _ in specs}:
        raise typer.BadParameter("--bitmap names a volume that no --volume gives")
    token = TokenFile(token_file)
    manifest_text = load_manifest(manifest) if manifest is not None else None
    _logging()
    volumes: list[ExportedVolume] = []
    tls = ServerTls(cert_dir, san or default_sans(), tls_settings)
    try:
        volumes += [open_exported(n, p, bitmaps.get(n)) for n, p in specs]
        server = ExportServer(name, volumes, token, manifest_text)
        if links_json is not None:
            assert internal_url and external_url
            ca = tls.ca_pem()
            outside = _read_pem(external_ca) if external_ca is not None else ca
            links = export_links(
                internal_url, external_url, ca, outside, volumes, manifest_text is not None
            )
            _write_json(links_json, links)

        async def on_stop() -> None:
            server.expire()
            if not await server.drained(opts.grace):
                note(f"export {name}: transfers still running after the grace period are cut")

        run(server.app(), tls, opts, _announce(f"export {name}", address), on_stop)
    finally:
        for v in volumes:
            v.close()
        tls.close()
    note(f"export {name} stopped")


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
    no_progress: Annotated[bool, typer.Option("--no-progress")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON result.")] = False,
) -> None:
    """Download a volume into a raw file: only allocated ranges, resuming after breaks."""
    from diskferry.disk.file_volume import is_block_device
    from diskferry.disk.progress import Progress
    from diskferry.export.download import DownloadRequest, download

    if encoding not in ("raw", "gzip", "zstd"):
        raise typer.BadParameter(f"{encoding!r} is not raw, gzip or zstd", param_hint="--encoding")
    if token is not None and token_file is not None:
        raise typer.BadParameter("give --token or --token-file, not both")
    if not 1 <= connections <= 16:
        raise typer.BadParameter("give 1 to 16", param_hint="--connections")
    if token_file is not None:
        from diskferry.export.token import TokenFile

        token = TokenFile(token_file).read()
    req = DownloadRequest(
        url=url,
        target=target,
        token=token,
        ca_bundle=ca_bundle,
        headers=parse_headers(header),
        encoding=encoding,  # type: ignore[arg-type]
        connections=connections,
    )
    if is_block_device(target):
        note(f"overwriting block device {target}; on failure it is left partly written")
    progress = Progress()
    cancel = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: cancel.set())
    try:
        with progress_bar(progress, "download", enabled=not no_progress and not json_out):
            result = download(req, progress, cancel)
    finally:
        signal.signal(signal.SIGTERM, previous)
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
    address: Address = "0.0.0.0",
    port: Port = 8443,
    tls_settings: TlsSettingsFile = None,
    header_timeout: HeaderTimeout = "10s",
    idle_timeout: IdleTimeout = "60s",
    backend_idle_timeout: Annotated[
        str, typer.Option(help="Idle pooled backend connections close after this.")
    ] = "30s",
    grace: Grace = "10s",
) -> None:
    """Route /api/export.kubevirt.io/... requests to the export servers in the routes file."""
    from diskferry.export.certs import default_sans
    from diskferry.export.proxy import ExportProxy, PoolSettings
    from diskferry.export.routes import RoutesFile
    from diskferry.export.serve import run
    from diskferry.export.tls import ServerTls

    opts = _serve_options(address, port, header_timeout, idle_timeout, grace, None)
    proxy = ExportProxy(RoutesFile(routes), PoolSettings(idle=parse_duration(backend_idle_timeout)))
    _logging()
    tls = ServerTls(cert_dir, san or default_sans(), tls_settings)
    run(proxy.app(), tls, opts, _announce("export proxy", address))
    note("export proxy stopped")


def _serve_options(
    address: str, port: int, header: str, idle: str, grace: str, ttl: str | None
) -> ServeOptions:
    from diskferry.export.listener import Timeouts
    from diskferry.export.serve import ServeOptions

    return ServeOptions(
        host=address,
        port=port,
        ttl=None if ttl is None else parse_duration(ttl),
        grace=parse_duration(grace),
        timeouts=Timeouts(header=parse_duration(header), idle=parse_duration(idle)),
    )


def register(app: typer.Typer) -> None:
    """Add `export` and `proxy` to the `diskferry` command."""
    app.add_typer(export_app, name="export")
    app.add_typer(proxy_app, name="proxy")
