"""What every CLI has: -h as --help, --version, shell completion, and exit 2 on bad usage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from diskferry import __version__


@pytest.mark.parametrize("command", [(), ("import",), ("cbt", "enable"), ("export", "download")])
def test_h_is_help(diskferry, command: tuple[str, ...]) -> None:
    short, long = diskferry(*command, "-h"), diskferry(*command, "--help")
    assert short.code == long.code == 0, short.stderr
    assert short.stdout == long.stdout
    assert short.stdout.startswith(f"Usage: diskferry {' '.join(command)}".rstrip())
    assert "-h, --help" in short.stdout


def test_version(diskferry) -> None:
    shown = diskferry("--version")
    assert (shown.code, shown.stdout, shown.stderr) == (0, f"diskferry {__version__}\n", "")


def test_completion_installs_and_completes(diskferry, tmp_path: Path) -> None:
    """Typed in bash, as a user does: the shell is found among the command's parents, which
    the test process may not have (a background job's parent shell can be gone)."""
    diskferry.env.update(HOME=str(tmp_path), SHELL="/bin/bash")
    command = f"'{Path(sys.executable).with_name('diskferry')}' --install-completion; exit $?"
    installed = subprocess.run(["bash", "-c", command], env=diskferry.env, capture_output=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    script = tmp_path / ".bash_completions" / "diskferry.sh"
    assert "_DISKFERRY_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
    diskferry.env.update(
        _DISKFERRY_COMPLETE="complete_bash", COMP_WORDS="diskferry re", COMP_CWORD="1"
    )
    completed = diskferry()
    assert completed.code == 0, completed.stderr
    assert completed.stdout.split() == ["restore", "repo"]


def test_usage_errors_from_the_engines_exit_2(diskferry, tmp_path: Path) -> None:
    diskferry.env.update(DISKFERRY_PASSWORD="usage", DISKFERRY_CACHE_DIR=str(tmp_path / "cache"))
    repo = tmp_path / "repo"
    assert diskferry("repo", "init", "--repo", repo).code == 0
    latest = diskferry("restore", "latest", tmp_path / "out.raw", "--repo", repo)
    assert (latest.code, latest.error) == (
        2,
        "'latest' needs --vm and --disk to say whose snapshot",
    )
    token = tmp_path / "token"
    token.write_text("t\n")
    serve = diskferry(
        "export", "serve", "--name", "e", "--volume", "novalue", "--token-file", token,
        "--cert-dir", tmp_path / "ca", "--port", "0",
    )  # fmt: skip
    assert (serve.code, serve.error) == (2, "'novalue' is not NAME=VALUE (a name without '/')")
    disk = tmp_path / "d.raw"
    with open(disk, "wb") as f:
        f.truncate(1 << 20)
    twice = diskferry(
        "backup", "--repo", repo, "--vm", "vm", "--disk", f"d={disk}", "--disk", f"d={disk}"
    )
    assert (twice.code, twice.error) == (2, "each --disk needs its own name")
    assert not (tmp_path / "out.raw").exists()
