"""`diskferry demo`: the main jobs on one machine, end to end, on a sample disk."""

from __future__ import annotations

import base64
import contextlib
import gzip
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from diskferry.cli import demo_steps
from diskferry.cli.common import note
from diskferry.cli.demo_steps import (
    DISKFERRY,
    DemoError,
    apply,
    diskferry,
    get_object,
    step,
    watched,
)

_SAMPLE_SIZE = 256 << 20
_DATA_RUNS = 48
_RUN_LENGTH = 1 << 20

_DISK, _IMAGE, _FROM_IMAGE, _BLANK, _EXPORT = (
    "demo-disk",
    "demo-image",
    "from-image",
    "blank",
    "demo",
)
_OBJECTS = (
    ("vd", _DISK),
    ("vi", _IMAGE),
    ("vd", _FROM_IMAGE),
    ("vd", _BLANK),
    ("vmexport", _EXPORT),
)
_MARKER = ".diskferry-demo"


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
    from diskferry.qemu import convert_image

    raw = workdir / "sample.raw"
    with open(raw, "wb") as f:
        f.truncate(_SAMPLE_SIZE)
        stride = _SAMPLE_SIZE // _DATA_RUNS
        for i in range(_DATA_RUNS):
            f.seek(i * stride)
            f.write(os.urandom(_RUN_LENGTH // 2) + bytes([i + 1]) * (_RUN_LENGTH // 2))
    qcow2 = workdir / "sample.qcow2"
    convert_image(str(raw), str(qcow2), src_format="raw", dst_format="qcow2")
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _daemon(data_dir: Path, log: Path) -> Iterator[Path]:
    """Run `diskferry serve` on `data_dir`; yield its kubeconfig once written, then stop it and
    its workers with `diskferry serve --stop`."""
    from diskferry.cli.demo_backup import stop_jobs

    kubeconfig = data_dir / "kubeconfig"
    serve = [*DISKFERRY, "serve", "--data-dir", str(data_dir), "--port", str(_free_port())]
    serve += ["--proxy-port", str(_free_port())]
    with open(log, "wb") as err:
        proc = subprocess.Popen(serve, stdout=err, stderr=err)
    try:
        deadline = time.monotonic() + demo_steps.STEP_SECONDS
        while not kubeconfig.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise DemoError(f"diskferry serve did not start; see {log}")
            time.sleep(0.1)
        yield kubeconfig
    finally:
        stop_jobs(data_dir)
        proc.terminate()  # a daemon stopped before it recorded itself: nothing once it ended
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _manifests(url: str) -> str:
    """The example set: a disk from HTTP, an image kept in a claim, a disk made from that
    image, a blank disk, and an export of the first disk."""
    http = f'{{type: HTTP, http: {{url: "{url}"}}}}'
    return f"""\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: {_DISK}}}
spec:
  persistentVolumeClaim: {{size: 512Mi}}
  dataSource: {http}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualImage
metadata: {{name: {_IMAGE}}}
spec:
  storage: PersistentVolumeClaim
  dataSource: {http}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: {_FROM_IMAGE}}}
spec:
  persistentVolumeClaim: {{size: 1Gi}}
  dataSource:
    type: ObjectRef
    objectRef: {{kind: VirtualImage, name: {_IMAGE}}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: {_BLANK}}}
spec:
  persistentVolumeClaim: {{size: 1Gi}}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualMachineExport
metadata: {{name: {_EXPORT}}}
spec:
  source: {{apiGroup: diskferry.io, kind: VirtualDisk, name: {_DISK}}}
"""


def _ready(kubeconfig: Path) -> None:
    """Show the disks progressing with `get -w` until every object is Ready."""
    watched(kubeconfig, "vd", [(kind, name, "Ready", None) for kind, name in _OBJECTS])
    for kind in ("vi", "vmexport"):
        diskferry(kubeconfig, "get", kind)


def _download(workdir: Path, kubeconfig: Path, reference: Path) -> None:
    """Download the export's raw disk through the proxy (its external link), compare it."""
    from diskferry.qemu import compare_images

    status = get_object(kubeconfig, "vmexport", _EXPORT)["status"]
    external = status["links"]["external"]
    url = next(f["url"] for f in external["volumes"][0]["formats"] if f["format"] == "raw")
    secret = get_object(kubeconfig, "secret", status["tokenSecretRef"])
    token_file = workdir / "export-token"
    token_file.write_bytes(base64.b64decode(secret["data"]["token"]))
    token_file.chmod(0o600)
    ca = workdir / "export-ca.crt"
    ca.write_text(external["cert"])
    target = workdir / "downloaded.img"
    note(f"downloading {url}")
    secrets = ("--token-file", str(token_file), "--ca-bundle", str(ca))
    step([*DISKFERRY, "export", "download", url, str(target), *secrets], "export download")
    if not compare_images(str(reference), str(target), "raw", "raw"):
        raise DemoError(f"{target} differs from the sample")
    note("downloaded through the proxy; qemu-img compare with the sample: equal")


def demo_command(
    workdir: Annotated[
        Path, typer.Option("--dir", help="Working directory for the demo's files.")
    ] = Path("diskferry-demo"),
) -> None:
    """Run the daemon, make disks and an export through it and download the export, then run a
    VM on the disk, back it up twice around writes, and restore and compare both points.

    Makes a sample disk (qcow2, gzip-compressed) in DIR and serves it over HTTP on
    127.0.0.1; starts `diskferry serve` on a data directory of its own (`DIR/data`, free
    ports) and applies `DIR/manifests.yaml`: a VirtualDisk from that URL, a VirtualImage kept
    in a claim (`storage: PersistentVolumeClaim`), a VirtualDisk made from the image, a
    blank VirtualDisk and a VirtualMachineExport of the first disk. `diskferry get vd -w`
    shows them progressing until `diskferry wait` sees each Ready; the export's raw disk is
    downloaded through the proxy (its external link, the token from the Secret the export
    names) with `diskferry export download` and compared with the sample; the export is
    deleted.

    Then, through the same daemon (`DIR/vm.yaml`): a VirtualMachine on the imported disk (a
    qemu-system-x86_64 with no guest OS), labelled `diskferry.io/changed-block-tracking:
    "true"`, and a BackupStorageLocation in `DIR/backups` whose password (`diskferry-demo`,
    printed) is in a Secret. A Backup (`DIR/backup-1.yaml`) makes a full backup; 16
    scattered 64 KiB blocks are written into the running VM's disk through its QMP socket
    (`human-monitor-command` `qemu-io`); a second Backup is incremental, as its DataUpload's
    status says (1 MiB read). A copy of the disk is kept at each point. Two Restores
    (`DIR/restore.yaml`) bring each point back into a namespace of its own (`restored-1`,
    `restored-2`, by `namespaceMapping`), and each restored disk is compared byte for byte
    with the copy of its point. `diskferry get -w` shows the VMs, the DataUploads and the
    DataDownloads as they go.

    The restored VMs come up AlwaysOn, as they were backed up; then every VM is set
    AlwaysOff and the daemon stopped, so that nothing keeps running. It ends by saying what
    it made and how to look at it again (`diskferry serve --data-dir DIR/data`, then
    `diskferry get vd -A --data-dir DIR/data` or `kubectl --kubeconfig DIR/data/kubeconfig
    get vd,vi,vm,backup,restore -A`).
    """
    from diskferry.cli.demo_backup import (
        VM,
        backup_and_restore,
        check_socket_paths,
        namespaces,
        stop_machines,
    )

    data_dir = workdir.resolve() / "data"
    check_socket_paths(data_dir)
    _fresh(workdir)
    workdir = workdir.resolve()
    served = workdir / "served"
    served.mkdir(exist_ok=True)
    note(f"making a {_SAMPLE_SIZE >> 20} MiB sample disk (qcow2, gzip) in {served}")
    packed = _make_sample(served)
    try:
        with _serve(served) as base:
            note(f"diskferry serve --data-dir {data_dir} (its log: {workdir / 'serve.log'})")
            with _daemon(data_dir, workdir / "serve.log") as kubeconfig:
                apply(kubeconfig, workdir / "manifests.yaml", _manifests(f"{base}/{packed.name}"))
                _ready(kubeconfig)
                _download(workdir, kubeconfig, served / "sample.raw")
                diskferry(kubeconfig, "delete", "vmexport", _EXPORT, "--wait")
                backup_and_restore(kubeconfig, workdir, data_dir, _DISK)
    finally:
        stop_machines(data_dir)
    note("daemon stopped")
    made = ", ".join(f"{kind} {name}" for kind, name in _OBJECTS if kind != "vmexport")
    note(
        f"made {made}, the VM {VM} and its two backups, restored into "
        f"{' and '.join(namespaces()[1:])}, in {data_dir}; the export {_EXPORT} served the "
        "download, then was deleted"
    )
    note(
        f"to look at them: diskferry serve --data-dir {data_dir}, then "
        f"diskferry get vd -A --data-dir {data_dir} or "
        f"kubectl --kubeconfig {data_dir / 'kubeconfig'} get vd,vi,vm,backup,restore -A"
    )


def register(app: typer.Typer) -> None:
    """Add `demo` to the CLI."""
    app.command("demo")(demo_command)
