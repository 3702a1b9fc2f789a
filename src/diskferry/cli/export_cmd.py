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

export_app = PlainTyper(
    help="""Serve disks over HTTPS as KubeVirt exports, and download them.

\b
diskferry export ca create --dir CERTS
diskferry export serve --name vm1 --volume disk=/data/vm1.img --token-file TOKEN --cert-dir CERTS
diskferry proxy serve --routes routes.yaml --cert-dir CERTS
diskferry export download URL vm1.img --token-file TOKEN --ca-bundle CERTS/ca.crt

The servers (`export serve`, `proxy serve`, `upload serve`) use `tls.crt` and `tls.key` in
their `--cert-dir` (CERTS above) when present, and otherwise issue themselves a certificate
from the CA in CERTS (`export ca create`) for the `--san` names (default: localhost,
127.0.0.1 and the host name). Certificate, key and TLS settings are reloaded when their
files change, without dropping transfers in flight. TLS settings (`--tls-settings`, YAML,
re-read on change): `minVersion: "1.2" | "1.3"`, `ciphers: <OpenSSL cipher string>`. The
cipher list applies to TLS 1.2 only: Python's ssl module cannot restrict TLS 1.3 cipher
suites."""
)
ca_app = PlainTyper(help="The CA that issues export server certificates.")
proxy_app = PlainTyper(help="The export proxy: one HTTPS entry that routes to export servers.")
export_app.add_typer(ca_app, name="ca")


@ca_app.command("create")
def ca_create(
    dir: Annotated[Path, typer.Option("--dir", help="Directory for ca.crt and ca.key.")],
) -> None:
    """Create a CA (ca.crt, ca.key) that export servers and the proxy issue certificates from.

    `ca.key` is written 0600.
    """
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
    """Serve one export's volumes over HTTPS with KubeVirt's paths, until its TTL.

    The paths are KubeVirt's virt-exportserver's, over HTTPS only: `/volumes/VOL/disk.img`
    (HEAD, single Range), `disk.img.gz` (compressed in parallel), `disk.img.zst`, `extents`
    (the allocation, paged JSON), `disk.tar.gz` and `dir/` for a volume that is a directory,
    `/exports/VOL/map` and `/exports/VOL/data` (with `--bitmap`, an NBD volume's map
    shows its dirty runs), `/{internal,external}/manifests/{all,secret}` and
    `/exportready`. A volume is a file, a block device, a directory or an NBD URL.

    The token (header or query parameter `x-kubevirt-export-token`) is re-read from
    `--token-file` on every request, compared in constant time, and never logged. `--port 0`
    picks a free port and prints it alone on the first stdout line. At the TTL new requests get
    410, transfers in flight finish (up to `--grace`), and the server exits 0. Request headers
    must arrive within `--header-timeout`; idle keep-alive connections close after
    `--idle-timeout`; a flowing body is never cut. Every refusal, an unknown path (404) or
    method (405) included, is JSON `{"reason": ..., "message": ...}`; a client that hangs up
    mid-download is one access-log line, whose byte count shows how much it got.

    `--unix-socket PATH` also serves the same paths, behind the same token, in plain HTTP on
    a Unix socket, for a proxy on the same host: the socket is owner-only (0600; its
    directory is made 0700 when missing), a stale one left by a killed server is replaced
    (one another server still accepts on is refused), and it is removed when the server
    stops. There a file or block device's bytes go by sendfile(2), from the page cache to
    the socket without passing through the server's memory; a client that takes none of
    them for `--idle-timeout` is cut.

    `--links-json` writes the `internal` and `external` links in the shape of KubeVirt's
    VirtualMachineExportStatus (`cert`, `volumes[].formats[]`, `manifests[]`,
    `backups[].endpoints[]`).
    """
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
    """Download a volume into a raw file: only allocated ranges, resuming after breaks.

    URL is a volume's `disk.img` URL, direct or through the proxy. With `raw` it reads the
    sibling `extents` (when the server offers it) and fetches only allocated ranges over N
    connections into a sparse file, resuming any break with Range; against a plain KubeVirt
    server it reads the whole disk. `gzip` and `zstd` fetch that sibling and decompress as
    they go. `--token` is visible to other users of the machine (in `ps`), and the command
    warns of it; `--token-file` is not. A refusal shows the server's own reason: `BadToken`
    or `MissingToken`, `UnknownVolume`, the proxy's `UnknownExport: no export NS/NAME` or
    `ExportNotReady` (503: not ready yet, retried first).
    """
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
    cert_dir: CertDir,
    routes: Annotated[
        Path | None, typer.Option(help="Routes file (YAML), reloaded on change.")
    ] = None,
    services_ca: Annotated[
        Path | None,
        typer.Option(
            help="In a cluster: route each export to its server's headless Service instead, "
            "verified against this CA (PEM), reloaded on change."
        ),
    ] = None,
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
    """Route /api/export.kubevirt.io/... requests to the export servers in the routes file,
    or in a cluster to each export's server behind its headless Service.

    Requests under
    `/api/export.kubevirt.io/{v1,v1beta1}/namespaces/NS/virtualmachineexports/NAME/...` go
    to the export servers listed in the routes file (re-read when it changes): 400 where the
    path does not match (its message names the versions served), 404 for an unknown export,
    503 with Retry-After for one not ready. A routes file that is missing, or not as below,
    stops the proxy at start with one line naming each field at fault and its line
    (`exports[0].url: Field required (line 2)`); a bad edit later is logged and the previous
    routes kept.

    \b
    exports:
      - namespace: default
        name: vm1
        url: https://127.0.0.1:8443
        caFile: /path/to/ca.crt
        ready: true
        unixSocket: /run/diskferry/vm1.sock   # optional: the same server on this host
        refusedWhileStarting: false           # true: a refused connection is 503, not 502

    One shared, bounded connection pool (20 per backend, 100 in all; a request that finds
    its backend's share or the pool taken for 60 s gets 503 with Retry-After); responses
    stream with backpressure; each backend's certificate is verified against its `caFile`.
    A route with `unixSocket` reaches its server on that socket of the same host in plain
    HTTP instead, with no TLS on the hop (one kept pool per socket, within the same
    bounds); the server still checks the token. A socket that another user serves
    (SO_PEERCRED) gets no request: 502 BackendNotTrusted. The daemon's export servers run
    beside its proxy, so their routes name a socket in the runtime directory
    (/run/diskferry/exports as root, refused unless a private directory of the daemon's
    user); a route without one (a server on another host) goes over TLS.

    In a cluster (`--services-ca` instead of `--routes`, as deploy/ runs it) the export NAME
    of namespace NS is served by `https://virt-export-NAME.NS.svc:8443`, the headless Service
    the operator makes for its server (a name too long for a DNS label is cut and given a
    digest), verified against the export CA that `--services-ca` names: the cluster's DNS says
    which exports are there, and their servers which are ready, so the proxy needs no access
    to the cluster's API but to tell a starting export from none. The operator's Services
    publish their Pods before they are ready: a server that refuses the connection (it is
    starting) gets 503 ExportNotReady with Retry-After, as on one host. A name that resolves
    to nothing is a Service whose Pod has no address yet (503 as well) or no export (404
    UnknownExport): in a Pod given its ServiceAccount token, the proxy asks the cluster's API
    whether the Service exists (`get` on Services, as deploy/ grants it); without one it
    answers 404.

    The proxy runs in `--processes` processes, each with its own socket on the port
    (SO_REUSEPORT: the kernel spreads the connections) and its own event loop, so that its
    TLS runs on every core; together they keep the pool's bounds. The first starts the
    others, announces the port once all listen, warns when one ends early, and takes them
    with it when it stops or dies. Every process looks at the certificate and TLS settings
    files at least once a second.
    """
    from diskferry.disk import Progress
    from diskferry.export import ClusterApi, ProxyJob, serve_proxy

    if (routes is None) == (services_ca is None):
        raise typer.BadParameter("give --routes or --services-ca, one of them")
    job = build_job(
        ProxyJob,
        routes=path_text(routes),
        services_ca=path_text(services_ca),
        cluster_api=None if services_ca is None else ClusterApi.in_cluster(),
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
