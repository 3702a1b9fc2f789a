"""Transfer benchmarks: a clone over NBD against nbdcopy (from qemu-nbd and from `volume serve`),
a containerDisk pull from a local registry against `skopeo copy` then `qemu-img convert`, and
an upload through the upload server against curl to nginx's PUT (`client_body` to a file)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from benchmarks.bench_export import DISKFERRY, diskferry_server
from benchmarks.data import make_disk
from benchmarks.measure import Comparison, Run, alternate, proc_status, run_process
from benchmarks.nginx import free_port, nginx
from diskferry.serving.certs import issue_server_cert

TOKEN = "bench-upload-token"
_NBD_EXPORT = "disk"
_IMAGE = "disk:latest"


def _listening(port: int, proc: subprocess.Popen) -> None:
    """Wait until something listens on 127.0.0.1:`port`, or `proc` ended."""
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} ended with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{proc.args} did not listen on {port}")


@contextlib.contextmanager
def _serving(args: list[str], port: int) -> Iterator[subprocess.Popen]:
    """Run `args` (listening on `port`) until the block ends."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    try:
        _listening(port, proc)
        yield proc
    finally:
        proc.terminate()
        proc.wait(60)


@contextlib.contextmanager
def qemu_nbd(volume: Path) -> Iterator[str]:
    """qemu-nbd serving `volume` read-only, persistent; yields its NBD URL."""
    port = free_port()
    args = ["qemu-nbd", "-r", "-t", "-f", "raw", "-b", "127.0.0.1", "-p", str(port)]
    with _serving([*args, "-x", _NBD_EXPORT, str(volume)], port):
        yield f"nbd://127.0.0.1:{port}/{_NBD_EXPORT}"


@contextlib.contextmanager
def volume_serve(volume: Path) -> Iterator[str]:
    """`diskferry volume serve` of `volume`; yields its NBD URL."""
    port = free_port()
    args = [*DISKFERRY, "volume", "serve", str(volume), "--nbd", f"127.0.0.1:{port}"]
    with _serving([*args, "--name", _NBD_EXPORT], port):
        yield f"nbd://127.0.0.1:{port}/{_NBD_EXPORT}"


def _import(source: str, out: Path, *extra: str) -> Callable[[], Run]:
    return lambda: run_process([*DISKFERRY, "import", source, str(out), "--no-progress", *extra])


def _clones(raw: Path, ours_out: Path, peer_out: Path, rounds: int, clean) -> list:
    rows = []
    servers = (("qemu-nbd", qemu_nbd), ("diskferry volume serve", volume_serve))
    for name, server in servers:
        with server(raw) as url:
            cmp = alternate(
                f"clone over NBD from {name}",
                _import(url, ours_out),
                lambda url=url: run_process(f"nbdcopy {url} {peer_out} && sync {peer_out}"),
                rounds,
                clean,
            )
        rows.append((cmp, "peer: nbdcopy then sync; goal: time ratio <= 1.25"))
    return rows


def _pull(root: Path, qcow2: Path, ours_out: Path, peer_out: Path, rounds: int, clean) -> tuple:
    store = root / "store"
    push = [*DISKFERRY, "image", "push", str(qcow2), f"oci:{store / 'disk'}:latest"]
    subprocess.run([*push, "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    pulled = root / "pulled"
    peer = (
        f"rm -rf {pulled} && mkdir -p {pulled}/layers && "
        f"skopeo copy -q --src-tls-verify=false docker://127.0.0.1:{port}/{_IMAGE} "
        f"dir:{pulled}/blobs && for b in {pulled}/blobs/*; do "
        f"tar -xf $b -C {pulled}/layers 2>/dev/null || true; done && "
        f"qemu-img convert -O raw {pulled}/layers/disk/* {peer_out} && sync {peer_out}"
    )
    with _serving([*DISKFERRY, "image", "serve", str(store), "--port", str(port)], port):
        source = f"docker://127.0.0.1:{port}/{_IMAGE}"
        cmp = alternate(
            "pull a qcow2 containerDisk from a local registry",
            _import(source, ours_out, "--insecure"),
            lambda: run_process(peer),
            rounds,
            clean,
        )
    shutil.rmtree(pulled, ignore_errors=True)
    return cmp, "registry: diskferry image serve; peer: skopeo copy, tar, qemu-img convert, sync"


def _upload(root: Path, raw: Path, ours_out: Path, rounds: int, clean) -> tuple:
    ca = root / "ca"
    subprocess.run([*DISKFERRY, "export", "ca", "create", "--dir", str(ca)], check=True)
    chain, key = issue_server_cert(ca, ["127.0.0.1"])
    (root / "nginx.crt").write_bytes(chain)
    (root / "nginx.key").write_bytes(key)
    (root / "token").write_text(TOKEN + "\n")
    www = root / "www"
    (www / "body").mkdir(parents=True, exist_ok=True)
    put = (
        "location /up/ { dav_methods PUT; create_full_put_path on; client_max_body_size 0; "
        f"client_body_temp_path {www / 'body'}; }}"
    )
    serve = ["upload", "serve", str(ours_out), "--token-file", str(root / "token")]
    serve += ["--cert-dir", str(ca), "--san", "127.0.0.1", "--keep-serving"]

    cmd = ["curl", "-sSf", "-o", "/dev/null", "--cacert", str(ca / "ca.crt"), "-T", str(raw)]

    def ours() -> Run:
        with diskferry_server(serve, root / "upload.log") as server:
            run = run_process([*cmd, f"{server.url}/upload/{TOKEN}"])
            return Run(run.seconds, proc_status(server.proc.pid, "VmHWM"))

    def before() -> None:
        clean()
        shutil.rmtree(www / "up", ignore_errors=True)

    with nginx(www, root / "nginx.crt", root / "nginx.key", put) as web:
        cmp = alternate(
            "upload a raw image (curl -T)",
            ours,
            lambda: run_process([*cmd, f"{web}/up/disk.raw"]),
            rounds,
            before,
        )
    return cmp, f"peer: nginx PUT to a file; throughput ratio {1 / cmp.ratio:.2f}, goal >= 0.8"


def run(workdir: Path, rounds: int) -> list[tuple[Comparison, str]]:
    """The clone, pull and upload comparisons; peak RSS is the client's (the upload server's
    on the upload row)."""
    disk = make_disk((workdir / "data").resolve())
    root = (workdir / "transfer").resolve()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    ours_out, peer_out = root / "ours.raw", root / "peer.raw"

    def clean() -> None:
        ours_out.unlink(missing_ok=True)
        peer_out.unlink(missing_ok=True)
        subprocess.run(["sync"], check=True)

    rows = _clones(disk["raw"], ours_out, peer_out, rounds, clean)
    pull, note = _pull(root, disk["qcow2"], ours_out, peer_out, rounds, clean)
    rows.append((pull, f"{note}; goal: time ratio <= 0.6"))
    rows.append(_upload(root, disk["raw"], ours_out, rounds, clean))
    shutil.rmtree(root)
    return rows
