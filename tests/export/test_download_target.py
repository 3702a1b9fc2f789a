"""The download client's target: its own prime file, fsynced with its folder, gone on failure."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from export_plain_server import PlainServer
from export_support import TOKEN, MiB, make_disk
from server_support import Running
from strace_log import read_ops, run_traced

from diskferry.base.errors import CancelledError
from diskferry.disk.http import TruncatedError
from diskferry.disk.progress import Progress
from diskferry.export.download import DownloadRequest, download


class OnFirstBytes(Progress):
    """Progress that runs `action` once, when it is first told of bytes done."""

    def __init__(self, action: Callable[[], None]) -> None:
        super().__init__()
        self.action: Callable[[], None] | None = action

    def add(self, n: int) -> None:
        super().add(n)
        action, self.action = self.action, None
        if action is not None:
            action()


def _request(export: Running, target: Path, force: bool = False) -> DownloadRequest:
    url = f"{export.url}/volumes/disk/disk.img"
    return DownloadRequest(
        url=url, target=target, force=force, token=TOKEN, ca_bundle=str(export.ca)
    )


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """The target of a download, alone in its folder."""
    (tmp_path / "out").mkdir()
    return tmp_path / "out" / "out.img"


def test_two_downloads_to_one_target_write_their_own_files(
    export: Running, disk: Path, out: Path
) -> None:
    seen: list[list[str]] = []

    def second() -> None:
        download(_request(export, out), OnFirstBytes(lambda: seen.append(os.listdir(out.parent))))

    download(_request(export, out), OnFirstBytes(second))
    assert out.read_bytes() == disk.read_bytes()
    assert os.listdir(out.parent) == ["out.img"]
    # while the second ran, the first's file stood beside its own
    assert len(seen) == 1 and len(seen[0]) == 2


def test_a_cancelled_download_leaves_the_old_target_and_nothing_else(
    export: Running, out: Path
) -> None:
    out.write_bytes(b"old disk")
    cancel = threading.Event()
    with pytest.raises(CancelledError):
        download(_request(export, out, force=True), OnFirstBytes(cancel.set), cancel)
    assert out.read_bytes() == b"old disk"
    assert os.listdir(out.parent) == ["out.img"]


def test_a_failed_download_leaves_the_old_target_and_nothing_else(
    ca_dir: Path, tmp_path: Path, out: Path
) -> None:
    disk = make_disk(tmp_path / "plain.img", 24 * MiB, [(0, 24 * MiB)])
    server = PlainServer(disk.read_bytes(), ca_dir, drops=set(range(1, 100)))
    out.write_bytes(b"old disk")
    try:
        # the first 8 MiB of the one request for the run arrive and are written, then it breaks
        with pytest.raises(TruncatedError):
            download(server.request(out, retries=0, force=True))
    finally:
        server.stop()
    assert out.read_bytes() == b"old disk"
    assert os.listdir(out.parent) == ["out.img"]


def test_a_target_with_the_longest_name_a_folder_allows(
    export: Running, disk: Path, out: Path
) -> None:
    longest = out.with_name("d" * os.pathconf(out.parent, "PC_NAME_MAX"))
    download(_request(export, longest))
    assert longest.read_bytes() == disk.read_bytes()
    assert os.listdir(out.parent) == [longest.name]


def test_the_download_is_fsynced_and_its_folder_after_the_rename(
    export: Running, disk: Path, out: Path, token_file: Path, tmp_path: Path
) -> None:
    trace = tmp_path / "download.trace"
    command = [sys.executable, "-m", "diskferry.cli.main", "export", "download"]
    command += [f"{export.url}/volumes/disk/disk.img", str(out), "--no-progress"]
    command += ["--token-file", str(token_file), "--ca-bundle", str(export.ca)]
    run_traced(trace, command, dict(os.environ))
    assert out.read_bytes() == disk.read_bytes()
    ops = read_ops(trace)
    placed = [op for op in ops if op.kind == "place" and op.path == str(out)]
    assert len(placed) == 1, placed
    rename = placed[0]
    assert os.path.dirname(rename.source) == str(out.parent)
    assert [op for op in ops if op.kind == "sync" and op.path == rename.source]
    synced = [op for op in ops if op.kind == "sync" and op.path == str(out.parent)]
    assert [op for op in synced if op.start > rename.end], "the folder is not fsynced after"
