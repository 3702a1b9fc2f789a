"""A directory volume whose links lead outside it: the tar and dir/ never produce or follow them."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

from export_support import TOKEN, curl
from server_support import Running

AUTH = f"x-kubevirt-export-token: {TOKEN}"


def _get(r: Running, path: str) -> tuple[int, bytes]:
    p = curl("-H", AUTH, "--path-as-is", "-w", "\n%{http_code}", r.url + path, ca=r.ca)
    body, _, code = p.stdout.rpartition(b"\n")
    return int(code), body


def _escaping_member(member: tarfile.TarInfo) -> bool:
    parts = Path(member.name).parts
    if member.name.startswith("/") or ".." in parts:
        return True
    if member.issym():
        if member.linkname.startswith("/"):
            return True
        inside = os.path.normpath(os.path.join(os.path.dirname(member.name), member.linkname))
        return inside == ".." or inside.startswith("../")
    return member.islnk() and (member.linkname.startswith("/") or ".." in member.linkname)


def test_links_leading_outside_the_volume_are_neither_archived_nor_followed(
    export_factory, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the export\n")
    root = tmp_path / "files"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "inside").symlink_to("../a.txt")
    (root / "sub" / "up").symlink_to("../../secret.txt")
    (root / "shadow").symlink_to("/etc/shadow")
    (root / "absolute-inside").symlink_to(root / "a.txt")
    (root / "outside-dir").symlink_to(tmp_path)
    r = export_factory({"files": root})

    code, body = _get(r, "/volumes/files/disk.tar.gz")
    assert code == 200
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        members = tar.getmembers()
    names = sorted(m.name for m in members)
    assert names == ["a.txt", "sub", "sub/inside"]
    assert not [m.name for m in members if _escaping_member(m)]
    assert b"not for the export" not in body
    log = r.log.read_text()
    for name in ("sub/up", "shadow", "absolute-inside", "outside-dir"):
        assert f"left out of the archive of {root}: {name}, a link that leads outside it" in log

    assert _get(r, "/volumes/files/dir/sub/inside") == (200, b"alpha\n")
    for path in (
        "sub/up",
        "shadow",
        "outside-dir/secret.txt",
        "../secret.txt",
        "sub/../../secret.txt",
        "%2e%2e/secret.txt",
        "..%2Fsecret.txt",
    ):
        code, body = _get(r, f"/volumes/files/dir/{path}")
        assert code in (400, 404), path
        assert b"not for the export" not in body, path


def test_pipes_and_devices_in_the_volume_are_neither_archived_nor_opened(
    export_factory, tmp_path: Path
) -> None:
    root = tmp_path / "files"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    os.mkfifo(root / "pipe")
    os.mknod(root / "device", 0o600 | stat.S_IFBLK, os.makedev(7, 0))
    r = export_factory({"files": root})

    for name in ("pipe", "device"):
        code, body = _get(r, f"/volumes/files/dir/{name}")
        assert code == 404, name
        assert b"not a regular file" in body, name
    assert _get(r, "/volumes/files/dir/a.txt") == (200, b"alpha\n")
    code, body = _get(r, "/volumes/files/disk.tar.gz")
    assert code == 200
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        assert tar.getnames() == ["a.txt"]
    log = r.log.read_text()
    for name in ("pipe", "device"):
        assert f"{root}: {name}, neither a file, a folder nor a link" in log
