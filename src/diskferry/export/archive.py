"""A directory volume as a streamed tar.gz, and safe lookup of files inside it."""

from __future__ import annotations

import asyncio
import html
import logging
import os
import stat
import tarfile
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

log = logging.getLogger(__name__)

_QUEUE_DEPTH = 8


class _Stopped(Exception):
    """The reader went away; the archive thread stops."""


class _QueueWriter:
    """A file-like sink that hands each write to the event loop through a bounded queue."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes | None]) -> None:
        self._loop = loop
        self._queue = queue
        self.stopped = threading.Event()

    def write(self, data: bytes) -> int:
        if self.stopped.is_set():
            raise _Stopped
        asyncio.run_coroutine_threadsafe(self._queue.put(bytes(data)), self._loop).result()
        return len(data)

    def close(self) -> None:
        """Nothing to release: the queue belongs to the reader."""


def _link_escapes(root: Path, link: Path) -> bool:
    """Whether the symbolic link `link` under `root` would lead outside it once extracted.

    An absolute target leads wherever it is extracted to; a relative one escapes when its
    `..` climb above `root`, read from where the link stands.
    """
    target = os.readlink(link)
    if os.path.isabs(target):
        return True
    inside = os.path.normpath(os.path.join(os.path.dirname(link.relative_to(root)), target))
    return inside == ".." or inside.startswith("../")


def _write_archive(root: Path, sink: _QueueWriter) -> None:
    with tarfile.open(fileobj=sink, mode="w|gz", bufsize=1 << 20) as tar:  # type: ignore[call-overload]
        for path in sorted(root.rglob("*")):
            if sink.stopped.is_set():
                raise _Stopped
            name = str(path.relative_to(root))
            why = _left_out(root, path)
            if why:
                log.warning("left out of the archive of %s: %s, %s", root, name, why)
                continue
            tar.add(path, arcname=name, recursive=False)


def _left_out(root: Path, path: Path) -> str | None:
    """Why `path` stays out of the archive of `root`, or None when it goes in."""
    if path.is_symlink():
        return "a link that leads outside it" if _link_escapes(root, path) else None
    mode = path.lstat().st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "neither a file, a folder nor a link"


async def tar_gz_stream(root: Path) -> AsyncIterator[bytes]:
    """The directory `root` as a gzip-compressed tar, produced on a thread as it is read."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(_QUEUE_DEPTH)
    sink = _QueueWriter(loop, queue)

    def run() -> None:
        try:
            _write_archive(root, sink)
        except _Stopped:
            return
        finally:
            if not sink.stopped.is_set():
                asyncio.run_coroutine_threadsafe(queue.put(None), loop).result()

    worker = loop.run_in_executor(None, run)
    try:
        while (data := await queue.get()) is not None:
            yield data
        await worker
    finally:
        sink.stopped.set()
        while not queue.empty():
            queue.get_nowait()


def resolve_inside(root: Path, relative: str) -> Path | None:
    """The file `relative` under `root`, or None when it escapes `root` or does not exist."""
    base = root.resolve()
    target = (base / relative).resolve()
    if target != base and base not in target.parents:
        return None
    return target if target.exists() else None


def listing(directory: Path) -> str:
    """A small HTML index of `directory` with links relative to it."""
    rows = []
    for entry in sorted(directory.iterdir()):
        name = entry.name + ("/" if entry.is_dir() else "")
        rows.append(f'<a href="{quote(name)}">{html.escape(name)}</a>')
    return "<pre>\n" + "\n".join(rows) + "\n</pre>\n"
