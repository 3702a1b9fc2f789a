"""`diskferry demo`: the main jobs on one machine, end to end, on a sample disk."""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from diskferry.cli.common import note, progress_bar

_SAMPLE_SIZE = 256 << 20
_DATA_RUNS = 48
_RUN_LENGTH = 1 << 20


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
    subprocess.run(
        ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)], check=True
    )
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


def demo_command(
    workdir: Annotated[
        Path, typer.Option("--dir", help="Working directory for the demo's files.")
    ] = Path("diskferry-demo"),
    no_progress: Annotated[bool, typer.Option("--no-progress")] = False,
) -> None:
    """Make a sample disk, serve it over HTTP, import it with progress, and verify it."""
    from diskferry.disk.progress import Progress
    from diskferry.importer.engine import run_import
    from diskferry.importer.job import ImportJob
    from diskferry.qemu import img

    workdir.mkdir(parents=True, exist_ok=True)
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
            result = run_import(ImportJob(source=url, target=str(target)), progress, say=note)
    note(
        f"imported {result.source_format}+{result.compression}: {result.bytes_read} bytes "
        f"received, {result.bytes_written} bytes written, virtual size {result.virtual_size}, "
        f"{result.seconds:.2f} s"
    )
    if not img.compare(str(reference), str(target), "raw", "raw"):
        raise typer.Exit(1)
    allocated = os.stat(target).st_blocks * 512
    note(f"qemu-img compare: {target} equals the sample; {allocated >> 20} MiB allocated (sparse)")


def register(app: typer.Typer) -> None:
    """Add `demo` to the CLI."""
    app.command("demo")(demo_command)
