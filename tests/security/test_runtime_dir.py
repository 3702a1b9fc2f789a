"""The runtime directory (pid files, host locks, the export servers' sockets) and its exports/
folder are used only when each is a real directory of this user's with mode 0700: one another
user made, a symlink, or one others may write is refused as it is, never repaired."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from diskferry.control.host.embedded.proxy import export_socket
from diskferry.qemu import storage_daemon
from diskferry.qemu.storage_daemon import RuntimeDirError, runtime_dir

NOBODY = pwd.getpwnam("nobody")
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this user's runtime directory is to be (the tests run as root)."""
    assert os.geteuid() == 0, "these tests make directories of another user"
    where = tmp_path / "run"
    monkeypatch.setattr(storage_daemon, "ROOT_RUNTIME_DIR", where)
    return where


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_missing_runtime_dir_is_made_private(place: Path) -> None:
    old = os.umask(0o272)  # one that would leave the owner without write, others with some
    try:
        made = runtime_dir()
    finally:
        os.umask(old)
    assert made == place
    assert stat.S_ISDIR(place.lstat().st_mode) and _mode(place) == 0o700
    assert runtime_dir("exports") == place / "exports" and _mode(place / "exports") == 0o700


def test_a_symlink_is_refused(place: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    place.symlink_to(elsewhere)
    with pytest.raises(RuntimeDirError, match="symbolic link"):
        runtime_dir()
    assert place.is_symlink() and list(elsewhere.iterdir()) == []


def test_a_directory_others_may_write_is_refused_and_left_as_it_is(place: Path) -> None:
    place.mkdir()
    place.chmod(0o777)
    with pytest.raises(RuntimeDirError, match="mode 0777"):
        runtime_dir()
    assert _mode(place) == 0o777


def test_a_directory_of_another_user_is_refused_and_left_as_it_is(place: Path) -> None:
    place.mkdir(mode=0o700)
    os.chown(place, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(RuntimeDirError, match=f"uid {NOBODY.pw_uid}"):
        runtime_dir()
    assert place.lstat().st_uid == NOBODY.pw_uid and _mode(place) == 0o700


@pytest.mark.parametrize("fault", ["symlink", "mode", "owner", "file"])
def test_an_unsafe_exports_folder_refuses_the_export_socket(
    place: Path, tmp_path: Path, fault: str
) -> None:
    runtime_dir()
    exports = place / "exports"
    if fault == "symlink":
        (tmp_path / "theirs").mkdir(mode=0o700)
        exports.symlink_to(tmp_path / "theirs")
    elif fault == "file":
        exports.write_text("not a folder")
    else:
        exports.mkdir(mode=0o700)
        if fault == "mode":
            exports.chmod(0o733)
        else:
            os.chown(exports, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(RuntimeDirError):
        export_socket("vmexport-x")


def test_another_user_s_runtime_dir_refuses_them_too(tmp_path: Path) -> None:
    # as a user other than root, under XDG_RUNTIME_DIR: a folder there that root made
    runtime = Path(tempfile.mkdtemp(prefix="dfxdg", dir="/tmp"))
    try:
        runtime.chmod(0o755)
        (runtime / f"diskferry-{NOBODY.pw_uid}").mkdir(mode=0o700)
        probe = "from diskferry.qemu.storage_daemon import runtime_dir; runtime_dir()"
        done = subprocess.run(
            [*AS_NOBODY, sys.executable, "-c", probe],
            env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0
        assert "RuntimeDirError" in done.stderr and "uid 0" in done.stderr
    finally:
        for made in sorted(runtime.rglob("*"), reverse=True):
            made.rmdir()
        runtime.rmdir()
