"""Repository passwords: asked on a terminal when nothing gives them (twice at `repo init`),
and `repo key list|add|remove|passwd`, run as the real command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

EXE = str(Path(sys.executable).with_name("diskferry"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment without a password, with the test's own cache."""
    clean = {k: v for k, v in os.environ.items() if k != "DISKFERRY_PASSWORD"}
    return {**clean, "DISKFERRY_CACHE_DIR": str(tmp_path / "cache")}


def _on_a_terminal(env: dict[str, str], *args: str) -> pexpect.spawn:
    return pexpect.spawn(EXE, list(args), env=env, encoding="utf-8", timeout=60)


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXE, *args], capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL
    )


def _password_file(tmp_path: Path, name: str, password: str) -> str:
    path = tmp_path / name
    path.write_text(password + "\n")
    return str(path)


def test_init_asks_twice_and_other_commands_once(env, tmp_path: Path) -> None:
    repo = str(tmp_path / "repo")
    child = _on_a_terminal(env, "repo", "init", "--repo", repo)
    child.expect("enter the password for the new repository: ")
    child.sendline("one")
    child.expect("enter the password again: ")
    child.sendline("two")
    child.expect("diskferry: error: the passwords do not match")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert not (tmp_path / "repo" / "config").exists()

    child = _on_a_terminal(env, "repo", "init", "--repo", repo)
    child.expect("enter the password for the new repository: ")
    child.sendline("typed secret")
    child.expect("enter the password again: ")
    child.sendline("typed secret")
    child.expect("created repository")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "typed secret" not in child.before

    child = _on_a_terminal(env, "snapshots", "--repo", repo)
    child.expect("enter the password: ")
    child.sendline("typed secret")
    child.expect("ID")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    child = _on_a_terminal(env, "repo", "stats", "--repo", repo)
    child.expect("enter the password: ")
    child.sendline("wrong")
    child.expect("diskferry: error: wrong password")
    child.expect(pexpect.EOF)


def test_without_a_terminal_nothing_is_asked(env, tmp_path: Path) -> None:
    p = _run(env, "repo", "init", "--repo", str(tmp_path / "repo"))
    assert p.returncode == 1
    assert "enter the password" not in p.stderr and "a password is needed" in p.stderr


def test_key_list_add_remove_passwd(env, tmp_path: Path) -> None:
    repo = str(tmp_path / "repo")
    first = _password_file(tmp_path, "first", "first secret")
    second = _password_file(tmp_path, "second", "second secret")
    third = _password_file(tmp_path, "third", "third secret")
    assert _run(env, "repo", "init", "--repo", repo, "--password-file", first).returncode == 0
    add = ("repo", "key", "add", "--repo", repo, "--password-file", first)
    added = _run(env, *add, "--new-password-file", second)
    assert added.returncode == 0, added.stderr
    new_id = added.stderr.strip().rsplit(" ", 1)[1]

    listed = _run(env, "repo", "key", "list", "--repo", repo, "--password-file", second, "--json")
    keys = json.loads(listed.stdout)
    assert len(keys) == 2
    [current] = [k for k in keys if k["current"]]
    assert current["id"].startswith(new_id) and current["user"] and current["created"]
    old_id = next(k["id"] for k in keys if not k["current"])
    human = _run(env, "repo", "key", "list", "--repo", repo, "--password-file", second).stdout
    assert f"*{new_id}" in human and f" {old_id[:8]}" in human

    removing = ("repo", "key", "remove", "--repo", repo, "--password-file", second)
    refused = _run(env, *removing, new_id)
    assert refused.returncode == 1 and "is the one this password opens" in refused.stderr
    assert _run(env, *removing, old_id[:8]).returncode == 0
    opened = _run(env, "snapshots", "--repo", repo, "--password-file", first)
    assert opened.returncode == 1 and "wrong password" in opened.stderr

    passwd = ("repo", "key", "passwd", "--repo", repo, "--password-file", second)
    changed = _run(env, *passwd, "--new-password-file", third)
    assert changed.returncode == 0, changed.stderr
    assert _run(env, "snapshots", "--repo", repo, "--password-file", third).returncode == 0
    gone = _run(env, "snapshots", "--repo", repo, "--password-file", second)
    assert gone.returncode == 1 and "wrong password" in gone.stderr


def test_passwd_asks_the_new_password_twice_on_a_terminal(env, tmp_path: Path) -> None:
    repo = str(tmp_path / "repo")
    old = _password_file(tmp_path, "old", "old secret")
    assert _run(env, "repo", "init", "--repo", repo, "--password-file", old).returncode == 0
    child = _on_a_terminal(env, "repo", "key", "passwd", "--repo", repo, "--password-file", old)
    child.expect("enter the new password: ")
    child.sendline("new secret")
    child.expect("enter the password again: ")
    child.sendline("new secret")
    child.expect("changed the password")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    new = _password_file(tmp_path, "new", "new secret")
    assert _run(env, "snapshots", "--repo", repo, "--password-file", new).returncode == 0


def test_an_unencrypted_repository_has_no_keys_to_add(env, tmp_path: Path) -> None:
    repo = str(tmp_path / "repo")
    assert _run(env, "repo", "init", "--repo", repo, "--no-encryption").returncode == 0
    other = _password_file(tmp_path, "p", "secret")
    p = _run(env, "repo", "key", "add", "--repo", repo, "--new-password-file", other)
    assert p.returncode == 1 and "is not encrypted" in p.stderr
