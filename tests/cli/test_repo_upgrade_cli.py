"""`diskferry repo upgrade`: a format-2 repository brought to format 3 with its password, then
backed up into and restored from, as the real command."""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "backup"))

from backup_support import as_format_2, same

PASSWORD = "cli password"
MiB = 1 << 20


@pytest.fixture
def env(diskferry, tmp_path):
    """The CLI without a password in its environment, and with a cache of its own."""
    diskferry.env.pop("DISKFERRY_PASSWORD", None)
    diskferry.env["DISKFERRY_CACHE_DIR"] = str(tmp_path / "cache")
    return diskferry


def _volume(path: Path) -> Path:
    with open(path, "wb") as f:
        f.truncate(8 * MiB)
        f.seek(MiB)
        f.write(os.urandom(MiB + 123))
    return path


def test_a_format_2_repository_is_upgraded_then_backed_up_and_restored(env, tmp_path):
    url = str(tmp_path / "repo")
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    pw = ("--password-file", str(secret))
    assert env("repo", "init", "--repo", url, *pw).code == 0
    volume = _volume(tmp_path / "disk.raw")
    backup = ("backup", "--repo", url, "--vm", "vm", "--disk", f"d={volume}", "--no-progress")
    made = env(*backup, *pw, "--json")
    assert made.code == 0, made.stderr
    first = json.loads(made.stdout)["disks"][0]["snapshot"]
    kept = tmp_path / "first.raw"
    kept.write_bytes(volume.read_bytes())
    as_format_2(url)

    refused = env("snapshots", "--repo", url, *pw)
    assert refused.code == 1
    assert "format 2, whose config is not authenticated" in refused.error
    assert f"run 'diskferry repo upgrade --repo {url}'" in refused.error
    wrong = tmp_path / "wrong"
    wrong.write_text("not the password\n")
    assert "wrong password" in env("repo", "upgrade", "--repo", url, "--password-file", wrong).error

    upgraded = env("repo", "upgrade", "--repo", url, *pw)
    assert upgraded.code == 0, upgraded.stderr
    assert f"at {url} from format 2 to format 3" in upgraded.stderr
    again = env("repo", "upgrade", "--repo", url, *pw, "--json")
    assert again.code == 0, again.stderr
    assert {k: json.loads(again.stdout)[k] for k in ("foundFormat", "format")} == {
        "foundFormat": 3,
        "format": 3,
    }

    restored = tmp_path / "restored.raw"
    assert env("restore", first, restored, "--repo", url, *pw, "--no-progress").code == 0
    assert same(restored, kept)
    with open(volume, "r+b") as f:
        f.seek(5 * MiB)
        f.write(os.urandom(MiB))
    second = env(*backup, *pw)
    assert second.code == 0, second.stderr
    latest = tmp_path / "latest.raw"
    restore = ("restore", "latest", latest, "--repo", url, "--vm", "vm", "--disk", "d")
    assert env(*restore, *pw, "--no-progress").code == 0
    assert same(latest, volume)
    assert env("repo", "check", "--repo", url, "--read-data", *pw).code == 0


def test_a_plaintext_repository_is_upgraded_only_with_insecure_no_encryption(env, tmp_path):
    url = str(tmp_path / "plain")
    assert env("repo", "init", "--repo", url, "--no-encryption").code == 0
    old = as_format_2(url)
    refused = env("repo", "upgrade", "--repo", url)
    assert refused.code == 1 and "--insecure-no-encryption" in refused.error
    assert (tmp_path / "plain" / "config").read_bytes() == old
    upgraded = env("repo", "upgrade", "--repo", url, "--insecure-no-encryption", "--json")
    assert upgraded.code == 0, upgraded.stderr
    result = json.loads(upgraded.stdout)
    assert (result["foundFormat"], result["format"], result["encrypted"]) == (2, 3, False)
    assert env("snapshots", "--repo", url).code == 0
