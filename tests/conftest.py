"""Shared fixtures: sample disk images, an nginx file server, a faulty HTTP server, TLS, loops."""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The one hypothesis profile of the suite: examples bounded so CI stays quick, no deadline on
# a shared machine. HYPOTHESIS_PROFILE=long draws ten times as many.
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile("long", settings.get_profile("ci"), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

MiB = 1 << 20
DISK_SIZE = 32 * MiB
# (offset, length) of the random data in the reference disk: aligned and unaligned runs,
# one ending the disk
DATA_RUNS = [
    (0, 300_000),
    (1 * MiB, 64 * 1024),
    (5 * MiB + 4096, 700_000),
    (9 * MiB + 12_345, 333_333),
    (20 * MiB, 2 * MiB),
    (DISK_SIZE - 65_536, 65_536),
]
DATA_BYTES = sum(length for _, length in DATA_RUNS)
# an allocated run of explicit zeros, which an import must leave as a hole
ZERO_RUN = (14 * MiB, 2 * MiB)
COMPRESSORS = {
    "gzip": ["gzip", "-1", "-c"],
    "xz": ["xz", "-0", "-T2", "-c"],
    "zstd": ["zstd", "-q", "-c"],
    "bzip2": ["bzip2", "-1", "-c"],
}
ISO_MAGIC_OFFSET = 0x8001


def make_reference(path: Path) -> None:
    """A sparse raw disk with DATA_RUNS of random bytes and ZERO_RUN of written zeros."""
    rnd = random.Random(7)
    with open(path, "wb") as f:
        f.truncate(DISK_SIZE)
        for offset, length in DATA_RUNS:
            f.seek(offset)
            f.write(rnd.randbytes(length))
        f.seek(ZERO_RUN[0])
        f.write(bytes(ZERO_RUN[1]))


def compress(src: Path, kind: str, dst: Path | None = None) -> Path:
    """`src` compressed with the command-line tool for `kind`."""
    dst = dst or src.with_name(f"{src.name}.{kind}")
    with open(dst, "wb") as out:
        subprocess.run([*COMPRESSORS[kind], str(src)], stdout=out, check=True)
    return dst


def allocated(path: str | os.PathLike[str]) -> int:
    """Bytes a file occupies on disk."""
    return os.stat(path).st_blocks * 512


def same_image(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether `qemu-img compare` finds the two raw-readable images equal."""
    proc = subprocess.run(
        ["qemu-img", "compare", "-q", str(a), str(b)], capture_output=True, check=False
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode == 0


def leftovers(directory: str | os.PathLike[str]) -> list[str]:
    """Prime and scratch files left in `directory`."""
    names = os.listdir(directory)
    return [n for n in names if ".prime-" in n or ".scratch-" in n or "diskferry-scratch" in n]


class Images:
    """Images made from one reference disk, in every format and compression, made once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.reference = root / "reference.raw"
        make_reference(self.reference)
        self._made: dict[tuple[str, str | None], Path] = {}

    data_bytes = DATA_BYTES
    disk_size = DISK_SIZE
    same = staticmethod(same_image)
    allocated = staticmethod(allocated)
    leftovers = staticmethod(leftovers)
    compress = staticmethod(compress)

    def get(self, fmt: str, compression: str | None = None) -> Path:
        """The reference disk as `fmt` (raw, qcow2, vmdk, vhd, vhdx, vdi, iso), compressed."""
        key = (fmt, compression)
        if key not in self._made:
            if compression:
                self._made[key] = compress(self.get(fmt), compression)
            else:
                self._made[key] = self._convert(fmt)
        return self._made[key]

    def expected(self, fmt: str) -> Path:
        """The raw disk an import of `fmt` must give."""
        return self.get("iso") if fmt == "iso" else self.reference

    def _convert(self, fmt: str) -> Path:
        if fmt == "raw":
            return self.reference
        out = self.root / f"reference.{fmt}"
        if fmt == "iso":
            shutil.copyfile(self.reference, out)
            with open(out, "r+b") as f:
                f.seek(ISO_MAGIC_OFFSET)
                f.write(b"CD001")
            return out
        qemu_fmt = "vpc" if fmt == "vhd" else fmt
        args = ["convert", "-f", "raw", "-O", qemu_fmt, str(self.reference), str(out)]
        subprocess.run(["qemu-img", *args], check=True)
        return out


@pytest.fixture(scope="session")
def images(tmp_path_factory) -> Images:
    """The reference disk and its conversions."""
    return Images(tmp_path_factory.mktemp("images"))


@dataclass
class Cli:
    """Runs the `diskferry` command as a subprocess."""

    env: dict[str, str]

    def __call__(self, *args: str | os.PathLike[str], timeout: float = 120) -> Result:
        exe = Path(sys.executable).with_name("diskferry")
        proc = subprocess.run(
            [str(exe), *map(str, args)],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)


@dataclass
class Result:
    """Exit code and output of one command."""

    code: int
    stdout: str
    stderr: str

    @property
    def error(self) -> str:
        """The one `diskferry: error:` line; fails unless there is exactly one."""
        lines = [ln for ln in self.stderr.splitlines() if ln.startswith("diskferry: error: ")]
        assert len(lines) == 1, self.stderr
        return lines[0].removeprefix("diskferry: error: ")


@pytest.fixture
def diskferry(tmp_path) -> Cli:
    """The CLI, with TMPDIR in the test's own directory."""
    return Cli({**os.environ, "TMPDIR": str(tmp_path)})


@dataclass
class Refusal:
    """Runs an import that must fail, over a target file that must stay as it was."""

    cli: Cli
    directory: Path
    original: bytes = b"a disk that must survive\n" * 4096

    def __call__(self, source: str | os.PathLike[str], *options: str, code: int = 1) -> str:
        """The error line of `diskferry import SOURCE TARGET OPTIONS`, checked."""
        self.directory.mkdir(exist_ok=True)
        target = self.directory / "target.raw"
        target.write_bytes(self.original)
        result = self.cli("import", source, target, "--no-progress", "--force", *options)
        assert result.code == code, result.stderr
        assert target.read_bytes() == self.original
        assert leftovers(self.directory) == []
        assert leftovers(self.cli.env["TMPDIR"]) == []
        return result.error


@pytest.fixture
def refuse(diskferry, tmp_path) -> Refusal:
    """Check a refused import: its one error line and exit code, the target untouched."""
    return Refusal(diskferry, tmp_path / "out")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 10) -> None:
    """Wait until something listens on 127.0.0.1:`port`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


NGINX_SLOW = "slow"
NGINX_SLOW_RATE = "256k"


@dataclass
class Nginx:
    """An nginx serving `root` at `url`; what is published under `slow/` is sent at
    NGINX_SLOW_RATE a connection."""

    root: Path
    url: str

    def publish(self, path: Path, name: str | None = None, slow: bool = False) -> str:
        """Serve a copy (a hard link) of `path`, at NGINX_SLOW_RATE when `slow`; its URL."""
        name = f"{NGINX_SLOW}/{name or path.name}" if slow else name or path.name
        dst = self.root / name
        if not dst.exists():
            try:
                os.link(path, dst)
            except OSError:
                shutil.copyfile(path, dst)
        return f"{self.url}/{name}"


@pytest.fixture(scope="session")
def nginx(tmp_path_factory) -> Iterator[Nginx]:
    """nginx in the foreground on 127.0.0.1 with its own config, temp and log paths."""
    work = tmp_path_factory.mktemp("nginx")
    root = work / "www"
    (root / NGINX_SLOW).mkdir(parents=True)
    port = free_port()
    temps = " ".join(
        f"{kind}_temp_path {work}/{kind};" for kind in ("client_body", "proxy", "fastcgi")
    )
    temps += f" uwsgi_temp_path {work}/uwsgi; scgi_temp_path {work}/scgi;"
    conf = work / "nginx.conf"
    conf.write_text(
        f"daemon off; master_process off; user root; pid {work}/nginx.pid;\n"
        f"error_log {work}/error.log;\n"
        "events { worker_connections 128; }\n"
        f"http {{ access_log off; default_type application/octet-stream; {temps}\n"
        f"  server {{ listen 127.0.0.1:{port}; root {root};\n"
        f"    location /{NGINX_SLOW}/ {{ limit_rate {NGINX_SLOW_RATE}; }} }} }}\n"
    )
    proc = subprocess.Popen(
        ["nginx", "-c", str(conf), "-p", str(work), "-e", str(work / "error.log")],
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield Nginx(root, f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(10)


@dataclass
class Tls:
    """A private CA and a server certificate for 127.0.0.1 and localhost it signed."""

    ca: Path
    cert: Path
    key: Path

    def server_context(self):
        """An SSL context serving the certificate."""
        import ssl

        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx


@pytest.fixture(scope="session")
def tls(tmp_path_factory) -> Tls:
    """Make a CA and a server certificate with `cryptography`."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    work = tmp_path_factory.mktemp("tls")
    now = datetime.datetime.now(datetime.UTC)

    def build(subject, issuer, public_key, signer, ca: bool, sans=None):
        b = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            b = b.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
            b = b.add_extension(
                x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False
            )
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "diskferry test CA")])
    ca_cert = build(ca_name, ca_name, ca_key.public_key(), ca_key, True)
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    cert = build(name, ca_name, key.public_key(), ca_key, False, sans)
    pem = serialization.Encoding.PEM
    (work / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
    (work / "server.pem").write_bytes(cert.public_bytes(pem))
    (work / "server.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return Tls(work / "ca.pem", work / "server.pem", work / "server.key")


@dataclass
class Fault:
    """How the faulty server answers for one file."""

    path: Path | None = None
    ranges: bool = True
    drop_after: int | None = None
    drops: int = 1
    drops_from: int = 0  # how many GET answers come whole before the drops start
    length_delta: int = 0
    trickle: float = 0.0
    piece: int = 64 * 1024
    status: int | None = None
    statuses: int = 1_000_000
    redirect: str | None = None
    range_offset: int = 0
    changing: bool = False
    validator: bool = True  # whether answers carry an ETag (one that changes when `changing`)
    dropped: int = 0
    answered: int = 0
    version: int = 0


@dataclass
class FaultServer:
    """An aiohttp server whose answers break in the ways `Fault` names."""

    url: str = ""
    faults: dict[str, Fault] = field(default_factory=dict)
    # method, name, headers and the client's port of each request
    requests: list[tuple[str, str, dict[str, str], int]] = field(default_factory=list)

    def add(self, name: str, path: Path | None = None, **knobs) -> str:
        """Serve `path` at /`name` with the faults in `knobs`; its URL."""
        self.faults[name] = Fault(path, **knobs)
        return f"{self.url}/{name}"

    def seen(self, name: str) -> list[dict[str, str]]:
        """Headers of the GET requests for /`name`, in order."""
        return [h for method, n, h, _ in self.requests if n == name and method == "GET"]

    def connections(self, name: str) -> set[int]:
        """The client ports the GET requests for /`name` came from: one a connection."""
        return {port for method, n, _, port in self.requests if n == name and method == "GET"}

    async def handle(self, request):
        from aiohttp import web

        name = request.match_info["name"]
        port = request.transport.get_extra_info("peername")[1]
        self.requests.append((request.method, name, dict(request.headers), port))
        fault = self.faults.get(name)
        if fault is None:
            raise web.HTTPNotFound()
        if fault.status is not None and fault.statuses > 0:
            fault.statuses -= 1
            return web.Response(status=fault.status, text="broken on purpose\n")
        if fault.redirect is not None:
            raise web.HTTPFound(fault.redirect)
        assert fault.path is not None
        data = fault.path.read_bytes()
        start, end, status = 0, len(data), 200
        wanted = request.headers.get("Range")
        etag = None
        if fault.changing:
            fault.version += 1
            etag = f'"v{fault.version}"'
        elif fault.validator:
            etag = '"v0"'
        if etag and request.headers.get("If-Range", etag) != etag:
            wanted = None
        if wanted and fault.ranges:
            first, _, last = wanted.removeprefix("bytes=").partition("-")
            start = int(first) + fault.range_offset
            end = min(len(data), int(last) + 1) if last else len(data)
            if start >= len(data):
                return web.Response(status=416, headers={"Content-Range": f"bytes */{len(data)}"})
            status = 206
        resp = web.StreamResponse(status=status)
        if etag:
            resp.headers["ETag"] = etag
        resp.content_length = end - start + fault.length_delta
        if fault.ranges:
            resp.headers["Accept-Ranges"] = "bytes"
        if status == 206:
            resp.headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
        await resp.prepare(request)
        if request.method == "HEAD":
            return resp
        cut = None
        fault.answered += 1
        dropping = fault.answered > fault.drops_from and fault.dropped < fault.drops
        if fault.drop_after is not None and dropping:
            fault.dropped += 1
            cut = fault.drop_after
        body = memoryview(data)[start:end]
        for pos in range(0, len(body), fault.piece):
            piece = body[pos : pos + fault.piece]
            if cut is not None and pos + len(piece) >= cut:
                await resp.write(piece[: cut - pos])
                await resp.drain()
                request.transport.close()
                return resp
            await resp.write(piece)
            if fault.trickle:
                await asyncio.sleep(fault.trickle)
        if fault.length_delta > 0:
            await resp.drain()
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp


def _serve_in_thread(server: FaultServer, ssl_context=None) -> Iterator[FaultServer]:
    from aiohttp import web

    loop = asyncio.new_event_loop()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    scheme = "https" if ssl_context else "http"
    server.url = f"{scheme}://127.0.0.1:{port}"
    app = web.Application()
    app.router.add_route("*", "/{name}", server.handle)
    runner = web.AppRunner(app, access_log=None)

    async def start() -> None:
        await runner.setup()
        await web.SockSite(runner, sock, ssl_context=ssl_context).start()

    loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def faulty() -> Iterator[FaultServer]:
    """A plain-HTTP faulty server on 127.0.0.1."""
    yield from _serve_in_thread(FaultServer())


@pytest.fixture
def faulty_tls(tls) -> Iterator[FaultServer]:
    """The faulty server over HTTPS with the `tls` certificate."""
    yield from _serve_in_thread(FaultServer(), tls.server_context())


@pytest.fixture
def loop_device(tmp_path) -> Iterator[Callable[[int], str]]:
    """Make loop devices of a given size over sparse files; skipped where the kernel refuses."""
    devices: list[str] = []

    def make(size: int) -> str:
        backing = tmp_path / f"loop{len(devices)}.img"
        with open(backing, "wb") as f:
            f.truncate(size)
        proc = subprocess.run(
            ["losetup", "--find", "--show", str(backing)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            pytest.skip(f"the kernel refuses loop devices here: {proc.stderr.strip()}")
        devices.append(proc.stdout.strip())
        return devices[-1]

    try:
        yield make
    finally:
        for dev in devices:
            subprocess.run(["losetup", "-d", dev], check=False)


@pytest.fixture
def reflink_dir(tmp_path) -> Iterator[Path]:
    """A folder on a loop-mounted XFS filesystem that shares extents (reflink); skipped where
    the kernel refuses the loop device or the mount."""
    image, mount = tmp_path / "xfs.img", tmp_path / "xfs"
    with open(image, "wb") as f:
        f.truncate(512 << 20)
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], check=True)
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-o", "loop", str(image), str(mount)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"the kernel refuses the XFS loop mount here: {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


@pytest.fixture
def slow_nbd(tmp_path) -> Iterator[Callable[[Path, str], str]]:
    """Serve a raw file over NBD through nbdkit's rate filter: slow_nbd(path, "40M") is the URL
    of `path` read at 40 Mbit/s."""
    procs: list[subprocess.Popen[bytes]] = []

    def serve(path: Path, rate: str) -> str:
        sock = tmp_path / f"slow-{len(procs)}.sock"
        argv = ["nbdkit", "-f", "-U", str(sock), "--filter=rate", "file", str(path), f"rate={rate}"]
        procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL))
        deadline = time.monotonic() + 15
        while not sock.exists():
            assert procs[-1].poll() is None and time.monotonic() < deadline, "nbdkit did not start"
            time.sleep(0.02)
        return f"nbd+unix:///?socket={sock}"

    yield serve
    for proc in procs:
        proc.kill()
        proc.wait()
