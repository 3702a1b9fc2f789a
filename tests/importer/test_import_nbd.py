"""Clone over NBD: `volume serve` on one side, `import nbd://...` on the other."""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

MiB = 1 << 20
DISK = 64 * MiB
# a sparse disk: data islands, an allocated run of zeros, holes elsewhere
ISLANDS = {1 * MiB: 3 * MiB + 4096, 20 * MiB: 2 * MiB, DISK - MiB: MiB}
ALLOCATED_ZEROS = (40 * MiB, 4 * MiB)


def allocated(path: str | os.PathLike[str]) -> int:
    return os.stat(path).st_blocks * 512


def primes(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if ".prime-" in n]


def make_disk(path: Path) -> Path:
    """The sparse 64 MiB source disk."""
    with open(path, "wb") as f:
        f.truncate(DISK)
        for offset, length in ISLANDS.items():
            f.seek(offset)
            f.write(os.urandom(length))
        f.seek(ALLOCATED_ZEROS[0])
        f.write(bytes(ALLOCATED_ZEROS[1]))
    return path


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    return make_disk(tmp_path / "source.raw")


@pytest.fixture
def volume_serve(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[str], str]]]:
    """Run `diskferry volume serve VOLUME --nbd 127.0.0.1:0 ...`; the process and its URL."""
    procs: list[subprocess.Popen[str]] = []

    def start(volume: Path, *options: str) -> tuple[subprocess.Popen[str], str]:
        exe = Path(sys.executable).with_name("diskferry")
        proc = subprocess.Popen(
            [str(exe), "volume", "serve", str(volume), "--nbd", "127.0.0.1:0", *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url, proc.stderr.read() if proc.stderr else "no URL"
        return proc, url

    yield start
    for proc in procs:
        proc.terminate()
        proc.communicate(timeout=30)


def test_clone_is_byte_exact_and_as_sparse_as_the_source(diskferry, disk, tmp_path, volume_serve):
    _, url = volume_serve(disk)
    assert url.startswith("nbd://127.0.0.1:") and url.endswith("/source.raw")
    target = tmp_path / "clone.raw"
    result = diskferry("import", url, target, "--json")
    assert result.code == 0, result.stderr
    assert target.read_bytes() == disk.read_bytes()
    data = sum(ISLANDS.values())
    # the allocated run of zeros is read but not written: less than the source holds
    assert data <= allocated(target) <= data + MiB
    assert allocated(disk) >= data + ALLOCATED_ZEROS[1]
    out = json.loads(result.stdout)
    assert out["virtualSize"] == DISK
    assert out["bytesWritten"] == data
    # holes are never read: only the data and the allocated zeros cross the wire
    assert out["bytesRead"] == data + ALLOCATED_ZEROS[1]
    assert primes(tmp_path) == []


def test_clone_is_as_sparse_as_nbdcopys(diskferry, disk, tmp_path, volume_serve):
    _, url = volume_serve(disk)
    ours, theirs = tmp_path / "ours.raw", tmp_path / "theirs.raw"
    assert diskferry("import", url, ours, "--no-progress").code == 0
    theirs.touch()
    subprocess.run(["nbdcopy", url, str(theirs)], check=True)
    assert ours.read_bytes() == theirs.read_bytes()
    assert allocated(ours) <= allocated(theirs)


def test_clone_grows_to_size(diskferry, disk, tmp_path, volume_serve):
    _, url = volume_serve(disk)
    target = tmp_path / "bigger.raw"
    result = diskferry("import", url, target, "--size", "80M", "--json")
    assert result.code == 0, result.stderr
    assert target.stat().st_size == 80 * MiB
    assert target.read_bytes() == disk.read_bytes() + bytes(16 * MiB)


def test_clone_into_a_block_device_zeroes_what_the_source_has_not(
    diskferry, disk, loop_device, volume_serve
):
    device = loop_device(DISK + 8 * MiB)
    with open(device, "r+b", buffering=0) as f:
        f.write(b"\xa5" * (DISK + 8 * MiB))
    _, url = volume_serve(disk)
    result = diskferry("import", url, device, "--no-progress", "--force")
    assert result.code == 0, result.stderr
    assert f"this import overwrites the block device {device}" in result.stderr
    with open(device, "rb") as f:
        assert f.read() == disk.read_bytes() + bytes(8 * MiB)


@pytest.mark.parametrize("stopped", ["server killed", "import cancelled"])
def test_clone_stopped_midway_leaves_the_target_as_it_was(disk, tmp_path, stopped):
    sock = tmp_path / "slow.sock"
    # each read waits, so the copy is still running when the server dies
    server = subprocess.Popen(
        ["nbdkit", "-f", "-U", str(sock), "--filter=delay", "file", str(disk), "rdelay=2"],
        stdin=subprocess.DEVNULL,
    )
    try:
        while not sock.exists():
            assert server.poll() is None
            time.sleep(0.02)
        out = tmp_path / "out"
        out.mkdir()
        target = out / "target.raw"
        target.write_bytes(b"the disk that was here\n" * 1000)
        exe = Path(sys.executable).with_name("diskferry")
        importing = subprocess.Popen(
            [
                str(exe),
                "import",
                f"nbd+unix:///?socket={sock}",
                str(target),
                "--no-progress",
                "--force",
            ],
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "TMPDIR": str(tmp_path)},
        )
        while not primes(out):
            assert importing.poll() is None, importing.communicate()[1]
            time.sleep(0.02)
        if stopped == "server killed":
            server.kill()
            server.wait()
        else:
            importing.terminate()
        _, err = importing.communicate(timeout=120)
    finally:
        server.kill()
        server.wait()
    if stopped == "server killed":
        assert importing.returncode == 1, err
        assert "diskferry: error: " in err
    else:
        assert importing.returncode == 143, err
        assert "diskferry: cancelled" in err
    assert target.read_bytes() == b"the disk that was here\n" * 1000
    assert primes(out) == []


@pytest.mark.parametrize(
    ("option", "words"),
    [
        (("--format", "qcow2"), "import it as raw"),
        (("--checksum", "sha256:" + "0" * 64), "leave --checksum out"),
    ],
)
def test_stream_options_are_refused_for_an_nbd_source(
    diskferry, disk, tmp_path, volume_serve, option, words
):
    _, url = volume_serve(disk)
    target = tmp_path / "target.raw"
    result = diskferry("import", url, target, *option)
    assert result.code == 1
    assert words in result.error
    assert not target.exists()


def test_serve_ends_its_server_on_sigterm(disk, volume_serve):
    proc, url = volume_serve(disk)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "diskferry: cancelled" in err
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_serve_refuses_a_missing_volume(diskferry, tmp_path):
    result = diskferry("volume", "serve", tmp_path / "nothing.raw", "--nbd", "127.0.0.1:0")
    assert result.code == 1
    assert result.error == f"the volume {tmp_path / 'nothing.raw'} does not exist"


@pytest.mark.parametrize("address", ["127.0.0.1:x", "[::1", ":80", "127.0.0.1:70000"])
def test_serve_refuses_a_bad_address(diskferry, disk, address):
    result = diskferry("volume", "serve", disk, "--nbd", address)
    assert result.code == 2
    assert "is not ADDRESS[:PORT]" in result.error


def client_certificates(ca_dir: Path, directory: Path) -> Path:
    """ca-cert.pem, and client-cert.pem with client-key.pem that the CA in `ca_dir` signed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "clone target")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir()
    (directory / "ca-cert.pem").write_bytes((ca_dir / "ca.crt").read_bytes())
    (directory / "client-cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "client-key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return directory


@pytest.fixture
def ca(diskferry, tmp_path: Path) -> Path:
    """The project's CA, made by `diskferry export ca create`."""
    directory = tmp_path / "ca"
    result = diskferry("export", "ca", "create", "--dir", directory)
    assert result.code == 0, result.stderr
    return directory


def test_clone_over_tls_with_a_client_certificate(diskferry, disk, tmp_path, volume_serve, ca):
    _, url = volume_serve(disk, "--cert-dir", str(ca))
    assert url.startswith("nbds://127.0.0.1:")
    client = client_certificates(ca, tmp_path / "client")
    target = tmp_path / "clone.raw"
    result = diskferry("import", f"{url}?tls-certificates={client}", target, "--json")
    assert result.code == 0, result.stderr
    assert target.read_bytes() == disk.read_bytes()
    assert allocated(target) <= sum(ISLANDS.values()) + MiB


def test_tls_server_refuses_a_client_without_a_certificate(
    diskferry, disk, tmp_path, volume_serve, ca
):
    _, url = volume_serve(disk, "--cert-dir", str(ca))
    only_ca = tmp_path / "only-ca"
    only_ca.mkdir()
    (only_ca / "ca-cert.pem").write_bytes((ca / "ca.crt").read_bytes())
    target = tmp_path / "clone.raw"
    without_cert = f"{url}?tls-certificates={only_ca}"
    plain = url.replace("nbds://", "nbd://")
    for source, words in ((without_cert, "closed the connection"), (plain, "TLS required")):
        result = diskferry("import", source, target, "--no-progress")
        assert result.code == 1, result.stderr
        assert words in result.error
        assert not target.exists()
        assert primes(tmp_path) == []
