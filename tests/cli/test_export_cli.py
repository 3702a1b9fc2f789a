"""`diskferry export` and `diskferry proxy`: registration, durations, and usage errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer

from diskferry.cli.server_options import parse_duration


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "diskferry.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_commands_are_registered() -> None:
    p = _run("--help")
    assert p.returncode == 0
    assert "export" in p.stdout and "proxy" in p.stdout
    sub = _run("export", "--help")
    for command in ("serve", "download", "ca"):
        assert command in sub.stdout


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2h", 7200.0),
        ("90m", 5400.0),
        ("1h30m", 5400.0),
        ("45s", 45.0),
        ("45", 45.0),
        ("1.5s", 1.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2d", "h", "-5s", "1h2h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(typer.BadParameter):
        parse_duration(text)


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    url = "https://127.0.0.1:1/volumes/disk/disk.img"
    token = tmp_path / "token"
    token.write_text("t")
    serve = ("export", "serve", "--name", "x", "--volume", f"d={token}")
    serve += ("--token-file", str(token), "--cert-dir", str(tmp_path))
    proxy = ("proxy", "serve", "--cert-dir", str(tmp_path))
    cases = [
        ("export", "download", url, str(tmp_path / "o"), "--encoding", "bzip2"),
        (
            "export",
            "download",
            url,
            str(tmp_path / "o"),
            "--token",
            "a",
            "--token-file",
            str(token),
        ),
        ("export", "download", url, str(tmp_path / "o"), "--connections", "0"),
        (*serve, "--links-json", str(tmp_path / "l.json")),
        (*serve, "--ttl", "soon"),
        proxy,
        (*proxy, "--routes", str(token), "--services-ca", str(token)),
    ]
    for args in cases:
        p = _run(*args)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.startswith("diskferry: error: ")
        assert not (tmp_path / "o").exists()


def test_bad_volume_exits_2_and_unreachable_server_1(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    p = _run(
        "export",
        "serve",
        "--name",
        "x",
        "--volume",
        "novalue",
        "--token-file",
        str(token),
        "--cert-dir",
        str(tmp_path),
    )
    assert p.returncode == 2 and "NAME=VALUE" in p.stderr
    url = "https://127.0.0.1:1/volumes/d/disk.img"
    p = _run("export", "download", url, str(tmp_path / "o"), "--retries", "0")
    assert p.returncode == 1 and p.stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()
