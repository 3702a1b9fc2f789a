"""A key file's scrypt parameters are bounded (n a power of two up to 2^20, r up to 32, p up to
16, 128·n·r up to 1 GiB): one that asks for more is refused, naming it, before any derivation."""

import json
import os
import sys
from pathlib import Path

import pytest
from backup_support import MiB, run_measured

from diskferry.backup import crypto
from diskferry.backup.config import KdfParams
from diskferry.backup.errors import KdfBoundsError
from diskferry.backup.key_ring import list_keys
from diskferry.backup.repository import Repository

PASSWORD = "correct horse"
EXE = str(Path(sys.executable).with_name("diskferry"))


def forge_kdf(url, name=None, **kdf):
    """Give the key file `name` (the repository's one) these scrypt parameters; its path in the
    repository."""
    if name is None:
        [name] = os.listdir(os.path.join(url, "keys"))
    path = os.path.join(url, "keys", name)
    with open(path) as f:
        key_file = json.load(f)
    key_file["kdf"].update(kdf)
    with open(path, "w") as f:
        json.dump(key_file, f)
    return f"keys/{name}"


@pytest.mark.parametrize(
    "kdf",
    [
        {"n": 1 << 40},
        {"n": 1 << 21, "r": 1},
        {"n": 1 << 20, "r": 16},
        {"n": 3000},
        {"n": 1},
        {"n": 16, "r": 33},
        {"n": 16, "r": 0},
        {"n": 16, "p": 17},
        {"n": 16, "p": 0},
    ],
    ids=["n-2^40", "n-2^21", "2GiB", "n-not-power-of-two", "n-1", "r-33", "r-0", "p-17", "p-0"],
)
def test_a_key_file_past_the_bounds_is_refused_before_deriving(dir_url, new_repo, monkeypatch, kdf):
    new_repo(dir_url)
    key = forge_kdf(dir_url, **kdf)
    derived = []
    monkeypatch.setattr(crypto, "_scrypt", lambda *inputs: derived.append(inputs) or bytes(32))
    with pytest.raises(KdfBoundsError, match=f"{dir_url}: {key} asks scrypt for ") as refused:
        Repository.open(dir_url, PASSWORD)
    assert refused.value.objects == (key,)
    assert derived == []


def test_the_bounds_take_the_key_files_diskferry_makes(dir_url, new_repo):
    new_repo(dir_url, kdf=KdfParams())
    with Repository.open(dir_url, PASSWORD) as opened:
        assert [k.current for k in list_keys(opened)] == [True]


def test_key_list_names_a_key_file_past_the_bounds(dir_url, new_repo):
    repo = new_repo(dir_url)
    new_repo(dir_url + "-other")  # a second key file, made under the same password
    [other] = os.listdir(os.path.join(dir_url + "-other", "keys"))
    os.rename(os.path.join(dir_url + "-other", "keys", other), os.path.join(dir_url, "keys", other))
    forged = forge_kdf(dir_url, other, n=1 << 40)
    with pytest.raises(KdfBoundsError, match=f"{forged} asks scrypt for "):
        list_keys(repo)


def test_a_key_file_asking_for_a_petabyte_is_refused_without_allocating(tmp_path, new_repo):
    url = str(tmp_path / "repo")
    new_repo(url)
    key = forge_kdf(url, n=1 << 40)
    env = {**os.environ, "DISKFERRY_PASSWORD": PASSWORD, "DISKFERRY_CACHE_DIR": str(tmp_path)}
    restore = [EXE, "restore", "latest", str(tmp_path / "out.raw"), "--repo", url]
    ran = run_measured([*restore, "--vm", "vm", "--disk", "d", "--no-progress"], env)
    assert ran.code == 1
    assert len(ran.stderr) == 1, ran.stderr
    assert ran.stderr[0].startswith(f"diskferry: error: {url}: {key} asks scrypt for n=2^40")
    assert ran.peak < 256 * MiB, f"peak RSS {ran.peak} bytes"
    assert not (tmp_path / "out.raw").exists()
