"""TLS (NBD_OPT_STARTTLS) against qemu-nbd with x509 credentials made here."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from nbd_helpers import Server, free_port, make_image, pattern
from nbd_pki import make_pki, tls_args

from diskferry.nbd.client import NbdClient
from diskferry.nbd.errors import NbdConnectionError, NbdError
from diskferry.nbd.volume import NbdVolume


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Server and client certificate directories from one CA, and one from another CA."""
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_over_unix_socket(
    qemu_nbd: Callable[..., Server], pki: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    server_dir, client_dir, _ = pki
    data = pattern(1 << 20, 3)
    image = make_image(tmp_path / "tls.raw", 8 << 20, {4096: data})
    server = qemu_nbd(image, "raw", *tls_args(server_dir))
    url = server.url.replace("nbd+unix", "nbds+unix")
    url += f"&tls-certificates={client_dir}&tls-hostname=localhost"
    blocks = {(i + 2) << 20: pattern(1 << 18, i) for i in range(4)}
    with NbdVolume.open(url, writable=True) as volume, ThreadPoolExecutor(8) as pool:
        assert volume.read(4096, len(data)) == data
        volume.write(0, b"over tls")
        assert [e.zero for e in volume.extents("zero")][:2] == [False, True]
        # one thread receives while the others send: reads and writes interleave
        reads = [pool.submit(volume.read, 4096 + i * 1000, 100_000) for i in range(64)]
        list(pool.map(lambda item: volume.write(*item), blocks.items()))
        assert all(r.result() == data[i * 1000 : i * 1000 + 100_000] for i, r in enumerate(reads))
    content = image.read_bytes()
    assert content[:8] == b"over tls"
    assert all(content[at : at + len(b)] == b for at, b in blocks.items())


def test_tls_over_tcp(
    serve: Callable[..., Server], pki: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    server_dir, client_dir, stranger_dir = pki
    image = make_image(tmp_path / "tcp.raw", 4 << 20, {0: b"tcp and tls"})
    port = free_port()
    argv = ["qemu-nbd", "--persistent", "-b", "127.0.0.1", "-p", str(port), "-f", "raw"]
    serve([*argv, *tls_args(server_dir), str(image)], ("127.0.0.1", port), "")
    with NbdClient.connect(f"nbds://127.0.0.1:{port}/?tls-certificates={client_dir}") as client:
        assert client.read(0, 11) == b"tcp and tls"
    with pytest.raises(NbdError) as caught:
        NbdClient.connect(f"nbd://127.0.0.1:{port}/")
    assert "TLS required" in str(caught.value) and "nbds://" in str(caught.value)
    with pytest.raises(NbdConnectionError) as caught:
        NbdClient.connect(f"nbds://127.0.0.1:{port}/?tls-certificates={stranger_dir}")
    assert "TLS with NBD server" in str(caught.value)
