"""Networked commands: each retry said on stderr, --retries and --timeout on every one, and a
resume said when it happens."""

from __future__ import annotations

import hashlib
import random
import socket
from pathlib import Path

import pytest

BODY = random.Random(5).randbytes(4 << 20)


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _retry_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("diskferry: retrying in ")]


def test_connection_refused_says_each_retry(diskferry, tmp_path: Path) -> None:
    url = f"https://127.0.0.1:{_closed_port()}/volumes/disk/disk.img"
    r = diskferry("export", "download", url, tmp_path / "out.img", "--retries", "2")
    assert r.code == 1
    assert _retry_lines(r.stderr) == [
        "diskferry: retrying in 0.5 s: cannot connect: connection refused",
        "diskferry: retrying in 1 s: cannot connect: connection refused",
    ]
    assert r.error.endswith("cannot connect: connection refused")


def test_an_unknown_host_is_named(diskferry, tmp_path: Path) -> None:
    r = diskferry("import", "http://nosuchhost.invalid/d.img", tmp_path / "o", "--retries", "1")
    assert r.code == 1
    assert _retry_lines(r.stderr) == [
        "diskferry: retrying in 0.5 s: cannot connect: unknown host nosuchhost.invalid"
    ]


@pytest.mark.parametrize(
    "command",
    [
        ["import", "{http}/d.img", "{out}"],
        ["info", "{http}/d.img"],
        ["export", "download", "{https}/volumes/disk/disk.img", "{out}"],
        ["upload", "send", "{file}", "{https}"],
        ["image", "push", "{file}", "docker://{host}/disk:1", "--insecure"],
        ["image", "pull", "docker://{host}/disk:1", "{out}", "--insecure"],
        ["image", "inspect", "docker://{host}/disk:1", "--insecure"],
        ["image", "list", "docker://{host}/disk", "--insecure"],
        ["image", "delete", "docker://{host}/disk:1", "--insecure"],
    ],
    ids=lambda c: " ".join(w for w in c if not w.startswith(("{", "-", "docker"))),
)
def test_every_networked_command_takes_retries_and_timeout(
    diskferry, tmp_path: Path, command: list[str]
) -> None:
    host = f"127.0.0.1:{_closed_port()}"
    file = tmp_path / "disk.img"
    file.write_bytes(b"\0" * 65536)
    fields = {"http": f"http://{host}", "https": f"https://{host}", "host": host}
    fields |= {"out": str(tmp_path / "out.img"), "file": str(file)}
    args = [word.format(**fields) for word in command]
    r = diskferry(*args, "--retries", "1", "--timeout", "5s")
    assert r.code == 1, r.stderr
    assert len(_retry_lines(r.stderr)) == 1, r.stderr
    assert "connection refused" in r.error


def test_a_bad_timeout_is_a_usage_error(diskferry, tmp_path: Path) -> None:
    r = diskferry("import", "http://127.0.0.1:1/d", tmp_path / "o", "--timeout", "0s")
    assert r.code == 2 and "--timeout" in r.error


def test_a_busy_server_is_retried_with_its_reason(diskferry, faulty, tmp_path: Path) -> None:
    source = tmp_path / "src.img"
    source.write_bytes(BODY)
    url = faulty.add("busy.img", source, status=503, statuses=1)
    r = diskferry("import", url, tmp_path / "out.img", "--no-progress")
    assert r.code == 0, r.stderr
    assert _retry_lines(r.stderr) == [
        "diskferry: retrying in 0.5 s: server answered HTTP 503 Service Unavailable: "
        "broken on purpose"
    ]


@pytest.mark.parametrize("read", ["ranged", "streamed"])
def test_a_resume_is_said(diskferry, faulty, tmp_path: Path, read: str) -> None:
    source = tmp_path / "src.img"
    source.write_bytes(BODY)
    if read == "ranged":
        # the GET that sniffs the image is closed early; the break falls on the run after it
        url = faulty.add("drop.img", source, drop_after=1 << 20, drops=1, drops_from=1)
        options: tuple[str, ...] = ()
    else:
        # a checksum is over the bytes in order: the image is streamed from that one GET
        url = faulty.add("drop.img", source, drop_after=1 << 20, drops=1)
        options = ("--checksum", f"sha256:{hashlib.sha256(BODY).hexdigest()}")
    r = diskferry("import", url, tmp_path / "out.img", "--no-progress", *options)
    assert r.code == 0, r.stderr
    assert (tmp_path / "out.img").read_bytes() == BODY
    [retry] = _retry_lines(r.stderr)
    assert retry.startswith("diskferry: retrying in 0.5 s: the transfer broke at byte ")
    assert f"diskferry: resumed {url} at byte " in r.stderr
