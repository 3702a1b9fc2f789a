"""`diskferry backup` and `restore` open the repository in a thread of its own, while they
load the engine they run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from diskferry.backup.config import KdfParams
from diskferry.backup.repository import Repository

PASSWORD = "opened ahead"

_RUN = """
import json, sys, threading
from diskferry.backup.repository import Repository
from diskferry.cli.main import app
opened_in = []
real_open = Repository.open
def recording_open(*args, **kwargs):
    opened_in.append(threading.current_thread().name)
    return real_open(*args, **kwargs)
Repository.open = recording_open
code = app(args=sys.argv[1:], standalone_mode=False)
print(json.dumps({"code": code, "openedIn": opened_in}))
"""


def _run(script: str, env: dict[str, str], *args: str) -> dict:
    """What `script`, run with the command line `args`, printed last, as JSON; it succeeded."""
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    )
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["code"] in (None, 0), proc.stderr
    return result


def _opened_in(*args: str) -> list[str]:
    return _run(_RUN, {**os.environ, "DISKFERRY_PASSWORD": PASSWORD}, *args)["openedIn"]


def _repository_and_volume(tmp_path: Path) -> tuple[str, Path]:
    """A repository (cheap to derive keys for) and a 4 MiB volume with 1 MiB of data."""
    repo = str(tmp_path / "repo")
    Repository.init(repo, PASSWORD, kdf=KdfParams(n=1 << 10, r=8, p=1)).close()
    volume = tmp_path / "disk.raw"
    with open(volume, "wb") as f:
        f.truncate(4 << 20)
        f.write(os.urandom(1 << 20))
    return repo, volume


def test_backup_and_restore_open_the_repository_ahead(tmp_path: Path) -> None:
    repo, volume = _repository_and_volume(tmp_path)
    backup = ("backup", "--repo", repo, "--vm", "vm", "--disk", f"d={volume}", "--no-progress")
    assert _opened_in(*backup) == ["repository-open"]
    restored = tmp_path / "restored.raw"
    restore = ("restore", "latest", str(restored), "--repo", repo, "--vm", "vm", "--disk", "d")
    assert _opened_in(*restore, "--no-progress") == ["repository-open"]
    assert restored.read_bytes() == volume.read_bytes()


_RUN_MAIN = """
import json, sys, threading
from diskferry.backup import crypto
derived_in = []
real_scrypt = crypto._scrypt
def recording_scrypt(*args):
    derived_in.append(threading.current_thread().name)
    return real_scrypt(*args)
crypto._scrypt = recording_scrypt
from diskferry.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    print(json.dumps({"code": e.code, "derivedIn": derived_in}))
"""


def _derived_in(env: dict[str, str], *args: str) -> list[str]:
    return _run(_RUN_MAIN, env, *args)["derivedIn"]


def test_backup_and_restore_derive_the_key_before_parsing_their_command_line(
    tmp_path: Path,
) -> None:
    repo, volume = _repository_and_volume(tmp_path)
    with_variable = {**os.environ, "DISKFERRY_PASSWORD": PASSWORD}
    backup = ("backup", "--repo", repo, "--vm", "vm", "--disk", f"d={volume}", "--no-progress")
    assert _derived_in(with_variable, *backup) == ["key-derivation"]
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    without = {k: v for k, v in os.environ.items() if k != "DISKFERRY_PASSWORD"}
    restored = tmp_path / "restored.raw"
    restore = ("restore", "latest", str(restored), f"--repo={repo}", "--vm", "vm", "--disk", "d")
    from_file = (*restore, "--password-file", str(secret), "--no-progress")
    assert _derived_in(without, *from_file) == ["key-derivation"]
    assert restored.read_bytes() == volume.read_bytes()
    listing = ("snapshots", "--repo", repo)
    assert _derived_in(with_variable, *listing) == ["MainThread"]


def test_a_password_file_that_is_a_pipe_is_read_once_by_the_command(tmp_path: Path) -> None:
    repo, volume = _repository_and_volume(tmp_path)
    pipe = tmp_path / "password"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_text(PASSWORD + "\n"), daemon=True)
    writer.start()
    without = {k: v for k, v in os.environ.items() if k != "DISKFERRY_PASSWORD"}
    backup = ("backup", f"--repo={repo}", "--vm", "vm", "--disk", f"d={volume}", "--no-progress")
    assert _derived_in(without, *backup, "--password-file", str(pipe)) == ["repository-open"]
    writer.join(10)
    assert not writer.is_alive()
