"""NbdClient against qemu-nbd and nbdkit: handshake, commands, block sizes, threads, errors."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from nbd_helpers import Server, free_port, make_image, nbdinfo_map, pattern

from diskferry.disk.extent import Extent
from diskferry.disk.file_volume import FileVolume
from diskferry.nbd.client import NbdClient
from diskferry.nbd.errors import NbdConnectionError, NbdError
from diskferry.nbd.handshake import list_meta_contexts
from diskferry.nbd.url import parse_url
from diskferry.nbd.volume import NbdVolume

MiB = 1 << 20
SIZE = 32 * MiB


@pytest.fixture
def raw_image(tmp_path: Path) -> Path:
    """A sparse 32 MiB raw image with data in a few places."""
    return make_image(
        tmp_path / "disk.raw",
        SIZE,
        {0: pattern(MiB, 1), 5 * MiB + 123: pattern(300_000, 2), SIZE - MiB: pattern(MiB, 3)},
    )


def _log_lines(path: Path, verb: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if f" {verb} id=" in line]


def test_handshake_reports_what_nbdinfo_sees(
    qemu_nbd: Callable[..., Server], raw_image: Path
) -> None:
    server = qemu_nbd(raw_image)
    info = json.loads(
        subprocess.run(["nbdinfo", "--json", server.url], check=True, capture_output=True).stdout
    )["exports"][0]
    with NbdClient.connect(server.url) as client:
        assert client.size == info["export-size"] == SIZE
        assert client.info.structured
        assert client.readonly is info["is_read_only"] is False
        assert client.can_flush is info["can_flush"]
        assert client.can_trim is info["can_trim"]
        assert client.can_zero is info["can_zero"]
        assert client.can_fast_zero is info["can_fast_zero"]
        blocks = (client.info.min_block, client.info.preferred_block, client.info.max_block)
        assert blocks == (
            info["block_size_minimum"],
            info["block_size_preferred"],
            info["block_size_maximum"],
        )


def test_read_only_export(qemu_nbd: Callable[..., Server], raw_image: Path) -> None:
    server = qemu_nbd(raw_image, "raw", "--read-only")
    with NbdClient.connect(server.url) as client:
        assert client.readonly
        with pytest.raises(NbdError) as caught:
            client.write(0, b"x" * 512)
    assert caught.value.errno_name == "EPERM"
    assert "read-only" in str(caught.value)


def test_reads_equal_the_file(qemu_nbd: Callable[..., Server], raw_image: Path) -> None:
    server = qemu_nbd(raw_image)
    expected = raw_image.read_bytes()
    with NbdClient.connect(server.url) as client:
        assert client.read(0, SIZE) == expected
        assert client.read(5 * MiB + 100, 1000) == expected[5 * MiB + 100 : 5 * MiB + 1100]
        buf = memoryview(bytearray(4096))
        client.read_into(SIZE - 4096, buf)
        assert bytes(buf) == expected[-4096:]


def test_writes_zeroes_trim_and_flush_land_in_the_file(
    qemu_nbd: Callable[..., Server], tmp_path: Path
) -> None:
    image = make_image(tmp_path / "full.raw", 8 * MiB, {0: pattern(8 * MiB, 4)})
    server = qemu_nbd(image)
    data = pattern(3 * MiB + 17, 5)
    with NbdClient.connect(server.url) as client:
        client.write(MiB + 1, data)
        client.write_zeroes(6 * MiB, MiB)
        client.write_zeroes(5 * MiB, 64 * 1024, no_hole=True)
        client.trim(7 * MiB, MiB)
        client.flush()
        assert client.read(6 * MiB, MiB) == bytes(MiB)
    assert file_slice(image, MiB + 1, len(data)) == data
    assert file_slice(image, 5 * MiB, 64 * 1024) == bytes(64 * 1024)
    assert file_slice(image, 6 * MiB, MiB) == bytes(MiB)
    with FileVolume(image) as volume:
        holes = [e for e in volume.extents("zero") if e.zero]
    covered = {(e.start, e.end) for e in holes}
    # write-zeroes may punch a hole; with no_hole it must not; trim punches one
    assert any(s <= 6 * MiB and e >= 7 * MiB for s, e in covered)
    assert not any(s < 5 * MiB + 64 * 1024 and e > 5 * MiB for s, e in covered)
    assert any(s <= 7 * MiB and e >= 8 * MiB for s, e in covered)


def file_slice(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def test_command_flags_reach_the_server(nbdkit: Callable[..., Server], tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    server = nbdkit("memory", "4M", f"logfile={log}", filters=("log",))
    with NbdClient.connect(server.url) as client:
        client.write(0, b"a" * 4096, fua=True)
        client.write_zeroes(0, 4096)
        client.write_zeroes(4096, 4096, no_hole=True)
        client.write_zeroes(8192, 4096, fast=True)
        client.flush()
    zeroes = _log_lines(log, "Zero")
    assert "trim=1" in zeroes[0] and "fast=0" in zeroes[0]
    assert "trim=0" in zeroes[1]
    assert "fast=1" in zeroes[2]
    assert "fua=1" in _log_lines(log, "Write")[0]
    assert len(_log_lines(log, "Flush")) == 1
    assert "Disconnect" in log.read_text()


def test_block_sizes_are_honoured(nbdkit: Callable[..., Server], tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    server = nbdkit(
        "memory",
        "4M",
        "blocksize-minimum=512",
        "blocksize-maximum=65536",
        "blocksize-error-policy=error",
        f"logfile={log}",
        filters=("log", "blocksize-policy"),
    )
    data = pattern(300_001, 6)
    with NbdClient.connect(server.url) as client:
        assert (client.info.min_block, client.info.max_block) == (512, 65536)
        client.write(1000, data)
        assert client.read(1000, len(data)) == data
        assert client.read(999, 3) == b"\0" + data[:2]
        client.write_zeroes(1100, 5000)
        assert client.read(1000, 6000) == data[:100] + bytes(5000) + data[5100:6000]
        client.trim(100, 70000)
    for line in _log_lines(log, "Read") + _log_lines(log, "Write"):
        fields = dict(f.split("=") for f in line.split() if f.startswith(("offset", "count")))
        assert int(fields["offset"], 16) % 512 == 0
        assert 0 < int(fields["count"], 16) <= 65536
        assert int(fields["count"], 16) % 512 == 0


def test_read_many_sends_every_request_before_waiting(
    nbdkit: Callable[..., Server], tmp_path: Path
) -> None:
    log = tmp_path / "requests.log"
    server = nbdkit(
        "memory",
        "4M",
        "blocksize-minimum=512",
        "delay-read=500ms",
        f"logfile={log}",
        filters=("log", "blocksize-policy", "delay"),
    )
    data = pattern(4 * MiB, 11)
    pieces = [
        (offset, bytearray(length))
        for offset, length in [(0, 4096), (70_001, 3000), (MiB, 200_000), (3 * MiB + 5, 1)]
    ]
    with NbdClient.connect(server.url) as client:
        client.write(0, data)
        client.read_many(pieces)
    for offset, buf in pieces:
        assert bytes(buf) == data[offset : offset + len(buf)]
    lines = [line for line in log.read_text().splitlines() if "Read id=" in line]
    first_answer = next(i for i, line in enumerate(lines) if "...Read" in line)
    # the reads of all pieces went out before the first answer came back
    assert first_answer == len(pieces)
    assert len(lines) == 2 * len(pieces)


def test_concurrent_reads_from_eight_threads(
    qemu_nbd: Callable[..., Server], tmp_path: Path
) -> None:
    image = make_image(tmp_path / "busy.raw", 16 * MiB, {0: pattern(16 * MiB, 8)})
    expected = image.read_bytes()
    server = qemu_nbd(image)
    rng = random.Random(9)
    jobs = []
    for _ in range(400):
        offset = rng.randrange(16 * MiB - 1)
        jobs.append((offset, rng.randint(1, min(256 * 1024, 16 * MiB - offset))))
    with NbdClient.connect(server.url, max_in_flight=4) as client, ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda job: client.read(*job), jobs))
    for (offset, length), got in zip(jobs, results, strict=True):
        assert got == expected[offset : offset + length]


def test_concurrent_writes_from_eight_threads(
    qemu_nbd: Callable[..., Server], tmp_path: Path
) -> None:
    image = make_image(tmp_path / "w.raw", 8 * MiB, {})
    server = qemu_nbd(image)
    blocks = {i * 128 * 1024: pattern(128 * 1024, i) for i in range(64)}
    with NbdClient.connect(server.url) as client, ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: client.write(*item), blocks.items()))
        client.flush()
    content = image.read_bytes()
    for offset, data in blocks.items():
        assert content[offset : offset + len(data)] == data


def test_read_past_the_end_is_einval(qemu_nbd: Callable[..., Server], raw_image: Path) -> None:
    server = qemu_nbd(raw_image)
    with NbdClient.connect(server.url) as client:
        with pytest.raises(NbdError) as caught:
            client.read(SIZE - 512, 1024)
        assert caught.value.errno_name == "EINVAL"
        assert "EINVAL" in str(caught.value) and "offset" in str(caught.value)
        assert "past EOF" in str(caught.value)  # the server's own message, from its error chunk
        assert not isinstance(caught.value, NbdConnectionError)
        assert client.read(0, 16) == raw_image.read_bytes()[:16]


def test_server_errors_carry_the_errno(nbdkit: Callable[..., Server]) -> None:
    server = nbdkit(
        "memory", "4M", "error-pwrite=ENOSPC", "error-pwrite-rate=100%", filters=("error",)
    )
    with NbdClient.connect(server.url) as client:
        with pytest.raises(NbdError) as caught:
            client.write(0, b"x" * 4096)
        assert caught.value.errno_name == "ENOSPC"
        assert client.read(0, 4) == bytes(4)


def test_killed_server_fails_waiting_requests(nbdkit: Callable[..., Server]) -> None:
    server = nbdkit("memory", "4M", "delay-read=60", filters=("delay",))
    client = NbdClient.connect(server.url)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            client.read(0, 4096)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(client._pending) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    server.proc.kill()
    for t in threads:
        t.join(20)
        assert not t.is_alive()
    assert len(errors) == 4
    assert all(isinstance(e, NbdConnectionError) for e in errors)
    with pytest.raises(NbdConnectionError):
        client.read(0, 512)
    client.close()


def test_tcp(serve: Callable[..., Server]) -> None:
    port = free_port()
    argv = ["nbdkit", "-f", "-i", "127.0.0.1", "-p", str(port), "memory", "8M"]
    server = serve(argv, ("127.0.0.1", port), f"nbd://127.0.0.1:{port}/")
    data = pattern(MiB + 3, 10)
    with NbdClient.connect(server.url) as client:
        assert client.url.host == "127.0.0.1"
        client.write(12345, data)
        assert client.read(12345, len(data)) == data
        assert client.size == 8 * MiB


def test_unknown_export_name(qemu_nbd: Callable[..., Server], raw_image: Path) -> None:
    server = qemu_nbd(raw_image, "raw", "--export-name=disk")
    with NbdClient.connect(server.url.replace(":///", ":///disk")) as client:
        assert client.info.name == "disk"
    with pytest.raises(NbdError) as caught:
        NbdClient.connect(server.url.replace(":///", ":///other"))
    assert "unknown export" in str(caught.value) and "export name" in str(caught.value)


def test_nothing_listens(tmp_path: Path) -> None:
    with pytest.raises(NbdConnectionError) as caught:
        NbdClient.connect(f"nbd+unix:///?socket={tmp_path}/none.sock")
    assert "cannot connect" in str(caught.value)


def test_meta_contexts_and_allocation_depth(
    qemu_nbd: Callable[..., Server], tmp_path: Path
) -> None:
    base = tmp_path / "base.qcow2"
    top = tmp_path / "top.qcow2"
    subprocess.run(["qemu-img", "create", "-f", "qcow2", str(base), "8M"], check=True)
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", "write 0 1M", str(base)], check=True)
    subprocess.run(
        ["qemu-img", "create", "-f", "qcow2", "-b", str(base), "-F", "qcow2", str(top)],
        check=True,
    )
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", "write 4M 64k", str(top)], check=True)
    server = qemu_nbd(top, "qcow2", "--allocation-depth")
    listed = list_meta_contexts(parse_url(server.url))
    assert {"base:allocation", "qemu:allocation-depth"} <= set(listed)
    contexts = ["qemu:allocation-depth", "base:allocation", "nonsense:context"]
    with NbdClient.connect(server.url, contexts=contexts) as client:
        assert set(client.contexts) == {"qemu:allocation-depth", "base:allocation"}
        got = []
        pos = 0
        while pos < client.size:
            descriptors = client.block_status(pos, client.size - pos)["qemu:allocation-depth"]
            for length, depth in descriptors:
                got.append({"offset": pos, "length": length, "type": depth})
                pos += length
    expected = nbdinfo_map(server.url, "qemu:allocation-depth")
    assert [(g["offset"], g["length"], g["type"]) for g in got] == [
        (e["offset"], e["length"], e["type"]) for e in expected
    ]
    assert {g["type"] for g in got} == {0, 1, 2}


def test_simple_replies_only(nbdkit: Callable[..., Server]) -> None:
    server = nbdkit("--no-sr", "memory", "4M")
    data = pattern(200_000, 13)
    with NbdClient.connect(server.url, contexts=["base:allocation"]) as client:
        assert not client.info.structured
        assert client.contexts == []
        client.write(777, data)
        assert client.read(777, len(data)) == data
        with pytest.raises(NbdError) as caught:
            client.read(4 << 20, 512)
        assert caught.value.errno_name == "EINVAL"
        assert client.read(0, 777) == bytes(777)
        volume = NbdVolume(client, writable=False)
        assert list(volume.extents("zero")) == [Extent(0, 4 << 20, zero=False)]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--mask-handshake=0",), "does not offer fixed newstyle"),
        (("--oldstyle",), "old-style handshake"),
    ],
)
def test_servers_without_fixed_newstyle_are_refused(
    nbdkit: Callable[..., Server], args: tuple[str, ...], said: str
) -> None:
    server = nbdkit(*args, "memory", "1M")
    with pytest.raises(NbdConnectionError) as caught:
        NbdClient.connect(server.url)
    assert said in str(caught.value)
