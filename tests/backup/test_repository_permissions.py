"""Another local user reads nothing of a repository or of its local cache: files 0600 in
folders 0700, whatever the umask."""

import os
import shutil
import stat
import subprocess
import tempfile

import pytest
from backup_support import PASSWORD, Engine, MiB

AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
# the user it runs as, then each path given that this user can read (a file) or list (a folder)
READABLE = (
    'id -un; for p; do if [ -d "$p" ]; then ls "$p"; else cat "$p"; fi >/dev/null 2>&1 '
    '&& echo "$p"; done; exit 0'
)


@pytest.fixture
def open_place():
    """A folder every user may pass through (the test's own tmp_path is root's alone)."""
    folder = tempfile.mkdtemp(prefix="diskferry-perm-", dir="/tmp")
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder)


def _private(path):
    return 0o700 if os.path.isdir(path) else 0o600


def _everything(root):
    found = [root]
    for where, folders, names in os.walk(root):
        found += [os.path.join(where, name) for name in folders + names]
    return found


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_another_user_reads_nothing_a_backup_made(
    open_place, tmp_path, new_repo, monkeypatch, umask
):
    url, cache = os.path.join(open_place, "repo"), os.path.join(open_place, "cache")
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", cache)
    monkeypatch.setenv("DISKFERRY_PASSWORD", PASSWORD)
    disk = tmp_path / "disk.raw"
    with open(disk, "wb") as f:
        f.truncate(4 * MiB)
        f.write(os.urandom(MiB))
    old = os.umask(umask)
    try:
        new_repo(url, chunk_size=MiB)
        Engine(url, tmp_path).backup(disks={"d": str(disk)})
    finally:
        os.umask(old)
    made = _everything(url) + _everything(cache)
    assert any("/packs/" in p for p in made) and any(p.endswith("index.sqlite") for p in made)
    seen = subprocess.run(
        [*AS_NOBODY, "sh", "-c", READABLE, "sh", *made], capture_output=True, text=True, check=True
    )
    assert seen.stdout.split() == ["nobody"]
    wrong = {p for p in made if stat.S_IMODE(os.lstat(p).st_mode) != _private(p)}
    assert wrong == set()
