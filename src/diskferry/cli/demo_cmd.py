"""`diskferry demo`: the main jobs on one machine, end to end, on a sample disk."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import secrets
import select
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from diskferry.cli.common import NOTES, note, progress_bar
from diskferry.disk.errors import DiskferryError
from diskferry.qemu import img

_SAMPLE_SIZE = 256 << 20
_DATA_RUNS = 48
_RUN_LENGTH = 1 << 20


_MARKER = ".diskferry-demo"
# the longest one command of the demo may take before it counts as hung
_STEP_SECONDS = 300


def _fresh(workdir: Path) -> None:
    """An empty working directory: one a previous demo made is emptied, others refused."""
    if workdir.exists() and any(workdir.iterdir()):
        if not (workdir / _MARKER).exists():
            raise DemoError(f"{workdir} is not empty and not a demo directory; use --dir")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / _MARKER).touch()


def _make_sample(workdir: Path) -> Path:
    """A sparse raw disk with scattered runs of data, as qcow2, gzip-compressed."""
    raw = workdir / "sample.raw"
    with open(raw, "wb") as f:
        f.truncate(_SAMPLE_SIZE)
        stride = _SAMPLE_SIZE // _DATA_RUNS
        for i in range(_DATA_RUNS):
            f.seek(i * stride)
            f.write(os.urandom(_RUN_LENGTH // 2) + bytes([i + 1]) * (_RUN_LENGTH // 2))
    qcow2 = workdir / "sample.qcow2"
    img.convert(str(raw), str(qcow2), src_format="raw", dst_format="qcow2")
    packed = workdir / "sample.qcow2.gz"
    with open(qcow2, "rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    qcow2.unlink()
    return packed


@contextlib.contextmanager
def _serve(directory: Path) -> Iterator[str]:
    """Serve `directory` over HTTP on 127.0.0.1 (with Range) while the block runs."""
    import asyncio

    from aiohttp import web

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_static("/", directory)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.run_until_complete(runner.cleanup())
        loop.close()


@contextlib.contextmanager
def _server(args: list[str], log: Path) -> Iterator[int]:
    """Run a `diskferry ... serve --port 0` child; yield the port it prints, stop it after."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "diskferry.cli.main", *args, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:
        assert proc.stdout is not None
        printed, _, _ = select.select([proc.stdout], [], [], _STEP_SECONDS)
        line = proc.stdout.readline().strip() if printed else b""
        if not line.isdigit():
            raise DemoError(f"{args[0]} {args[1]} did not start; see {log}")
        yield int(line)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class DemoError(DiskferryError):
    """A demo step did not do what it should."""

    reason = "DemoFailed"


def _export_step(workdir: Path, disk: Path, no_progress: bool) -> None:
    """Serve `disk` from an export server, download it through the proxy, compare."""
    from diskferry.disk.progress import Progress
    from diskferry.export.download import DownloadRequest, download

    certs = workdir / "certs"
    token_file = workdir / "token"
    token_file.write_text(secrets.token_urlsafe(24))
    token_file.chmod(0o600)
    _step(
        [sys.executable, "-m", "diskferry.cli.main", "export", "ca", "create", "--dir", str(certs)],
        "diskferry export ca create",
        stdout=subprocess.DEVNULL,
    )
    export_args = ["export", "serve", "--name", "vm1", "--volume", f"disk={disk}"]
    export_args += ["--token-file", str(token_file), "--cert-dir", str(certs)]
    export_args += ["--address", "127.0.0.1", "--ttl", "10m"]
    with _server(export_args, workdir / "export.log") as export_port:
        routes = workdir / "routes.yaml"
        routes.write_text(
            "exports:\n  - namespace: default\n    name: vm1\n"
            f"    url: https://127.0.0.1:{export_port}\n    caFile: {certs / 'ca.crt'}\n"
            "    ready: true\n"
        )
        proxy_args = ["proxy", "serve", "--routes", str(routes), "--cert-dir", str(certs)]
        proxy_args += ["--address", "127.0.0.1"]
        with _server(proxy_args, workdir / "proxy.log") as proxy_port:
            url = (
                f"https://127.0.0.1:{proxy_port}/api/export.kubevirt.io/v1/namespaces/default/"
                "virtualmachineexports/vm1/volumes/disk/disk.img"
            )
            note(f"export server on port {export_port}, proxy on port {proxy_port}")
            note(f"downloading {url}")
            target = workdir / "downloaded.img"
            progress = Progress()
            request = DownloadRequest(
                url=url,
                target=target,
                token=token_file.read_text(),
                ca_bundle=str(certs / "ca.crt"),
            )
            with progress_bar(progress, "download", enabled=not no_progress):
                result = download(request, progress)
    if not img.compare(str(disk), str(target), "raw", "raw"):
        raise DemoError(f"{target} differs from {disk}")
    note(
        f"downloaded through the proxy: {result.bytes_fetched} bytes fetched of "
        f"{result.size} (only what is allocated); qemu-img compare: equal"
    )


def _step(argv: list[str], what: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    """Run one command of the demo; one that fails or hangs is a DemoError naming `what`."""
    try:
        proc = subprocess.run(argv, timeout=_STEP_SECONDS, check=False, **kwargs)
    except subprocess.TimeoutExpired as e:
        raise DemoError(f"{what} did not finish within {_STEP_SECONDS} s") from e
    if proc.returncode != 0:
        raise DemoError(f"{what} failed")
    return proc


def _cli(*args: str, env: dict[str, str] | None = None) -> dict:
    """Run a diskferry command with --json and return its result."""
    proc = _step(
        [sys.executable, "-m", "diskferry.cli.main", *args, "--json"],
        f"diskferry {' '.join(args[:2])}",
        stdout=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def _backup_step(workdir: Path, disk: Path, before: Path) -> None:
    """Enable CBT, back up in full, write, back up incrementally, restore both points."""
    env = {"DISKFERRY_PASSWORD": "diskferry-demo"}
    repo = str(workdir / "repo")
    note(f"backup repository {repo} (password from DISKFERRY_PASSWORD)")
    _cli("repo", "init", "--repo", repo, env=env)
    _cli("cbt", "enable", str(disk))
    backup = ["backup", "--repo", repo, "--vm", "demo", "--disk", f"root={disk}", "--no-progress"]
    full = _cli(*backup, env=env)["disks"][0]
    note(f"backup 1: {full['type']} ({full['reason']}), {full['bytesUploaded']} bytes uploaded")
    overlay = f"{disk}.cbt.qcow2"
    writes = [f"write -P {0x40 + i} {i * 7 + 3}M 64k" for i in range(16)]
    _step(
        ["qemu-io", "-f", "qcow2", *[a for w in writes for a in ("-c", w)], overlay],
        "qemu-io",
        stdout=subprocess.DEVNULL,
    )
    note(f"the VM wrote 16 scattered 64 KiB blocks through {Path(overlay).name}")
    incr = _cli(*backup, env=env)["disks"][0]
    note(
        f"backup 2: {incr['type']} ({incr['reason']}), read {incr['bytesRead']} bytes, "
        f"uploaded {incr['bytesUploaded']} bytes"
    )
    for name, snapshot, reference in (
        ("restored-1.img", full["snapshot"], before),
        ("restored-2.img", incr["snapshot"], disk),
    ):
        out = workdir / name
        _cli("restore", snapshot, str(out), "--repo", repo, "--no-progress", env=env)
        if not img.compare(str(reference), str(out), "raw", "raw"):
            raise DemoError(f"{out} differs from {reference}")
        note(f"restored snapshot {snapshot} into {name}; qemu-img compare: equal")


def demo_command(
    workdir: Annotated[
        Path, typer.Option("--dir", help="Working directory for the demo's files.")
    ] = Path("diskferry-demo"),
    no_progress: Annotated[bool, typer.Option("--no-progress")] = False,
) -> None:
    """Import a sample disk, export it through the proxy, back it up and restore it."""
    from diskferry.disk.progress import Progress
    from diskferry.importer.engine import run_import
    from diskferry.importer.job import ImportJob

    _fresh(workdir)
    served = workdir / "served"
    served.mkdir(exist_ok=True)
    note(f"making a {_SAMPLE_SIZE >> 20} MiB sample disk (qcow2, gzip) in {served}")
    packed = _make_sample(served)
    reference = served / "sample.raw"
    target = workdir / "imported.img"
    with _serve(served) as base:
        url = f"{base}/{packed.name}"
        note(f"importing {url} into {target}")
        progress = Progress()
        with progress_bar(progress, "import", enabled=not no_progress):
            job = ImportJob(source=url, target=str(target))
            result = run_import(job, progress, reporter=NOTES)
    note(
        f"imported {result.source_format}+{result.compression}: {result.bytes_read} bytes "
        f"received, {result.bytes_written} bytes written, virtual size {result.virtual_size}, "
        f"{result.seconds:.2f} s"
    )
    if not img.compare(str(reference), str(target), "raw", "raw"):
        raise DemoError(f"{target} differs from the sample")
    allocated = os.stat(target).st_blocks * 512
    note(f"qemu-img compare: {target} equals the sample; {allocated >> 20} MiB allocated (sparse)")
    _export_step(workdir, target, no_progress)
    _backup_step(workdir, target, workdir / "downloaded.img")


def register(app: typer.Typer) -> None:
    """Add `demo` to the CLI."""
    app.command("demo")(demo_command)
