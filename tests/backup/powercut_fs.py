"""A FUSE filesystem in memory that loses, when its power is cut, whatever was not synced.

The model, kept simple:
- a file's data (its bytes and length) becomes durable at fsync or fdatasync of that file;
- a directory's entries (the names created, renamed, linked or unlinked in it) become
  durable at fsync of that directory;
- a cut sets every directory's entries and every file's data back to what was last made
  durable; a file or directory no durable entry reaches is gone. Nothing else is kept
  (modes, owners and times are made up).

Run as `python powercut_fs.py MOUNTPOINT [STATE]`: it mounts in the foreground (starting
from a tree that `save` wrote, when STATE is given) and answers commands on stdin, one
line each:
  count           the number of changing calls so far (create, mkdir, write, truncate,
                  fsync, fsyncdir, rename, link, unlink, rmdir)
  cut-after N     cut the power before the changing call after the next N (0: now)
  cut?            "yes" once the power is off, else "no"
  save PATH       write to PATH what a cut now would leave (the durable tree)
Once the power is off every call fails with EIO, until the filesystem is unmounted.
"""

from __future__ import annotations

import errno
import os
import pickle
import stat
import sys
import threading
import time
from typing import Any

from fuse import FUSE, FuseOSError, Operations

CHANGING = {
    "create",
    "mkdir",
    "write",
    "truncate",
    "fsync",
    "fsyncdir",
    "rename",
    "link",
    "unlink",
    "rmdir",
}
# calls answered even with the power off, so that the mount can still be stopped
AFTER_THE_CUT = {"init", "destroy", "release", "releasedir", "flush", "statfs"}


class Node:
    """A file or a directory, with what of it is durable."""

    def __init__(self, is_dir: bool) -> None:
        self.is_dir = is_dir
        self.data = bytearray()
        self.synced_data = b""
        self.entries: dict[str, Node] = {}
        self.synced_entries: dict[str, Node] = {}
        self.mtime = time.time()

    def durable(self, copies: dict[int, Node]) -> Node:
        """A copy of what of this node, and of the nodes it reaches, a cut would leave."""
        if id(self) not in copies:
            copy = copies[id(self)] = Node(self.is_dir)
            copy.data, copy.mtime = bytearray(self.synced_data), self.mtime
            copy.entries = {name: n.durable(copies) for name, n in self.synced_entries.items()}
        return copies[id(self)]

    def walk(self, seen: set[int] | None = None) -> list[Node]:
        """This node and every node its entries reach, durable or not, each once."""
        seen = seen if seen is not None else set()
        if id(self) in seen:
            return []
        seen.add(id(self))
        found = [self]
        for child in [*self.entries.values(), *self.synced_entries.values()]:
            found.extend(child.walk(seen))
        return found


class PowerCutFs(Operations):
    """The filesystem; every call runs under one lock, shared with the command reader."""

    def __init__(self, root: Node) -> None:
        self.root = root
        self.mutex = threading.Lock()
        self.handles: dict[int, Node] = {}
        self.next_handle = 1
        self.changes = 0
        self.cut_in: int | None = None
        self.off = False

    def __call__(self, op: str, *args: Any) -> Any:
        with self.mutex:
            if self.off and op not in AFTER_THE_CUT and not (op == "getattr" and args[0] == "/"):
                raise FuseOSError(errno.EIO)
            if op in CHANGING:
                if self.cut_in == 0:
                    self.cut()
                    raise FuseOSError(errno.EIO)
                if self.cut_in is not None:
                    self.cut_in -= 1
                self.changes += 1
            return super().__call__(op, *args)

    def cut(self) -> None:
        """Drop everything not synced, and turn the power off."""
        for node in self.root.walk():
            node.entries = dict(node.synced_entries)
            node.data = bytearray(node.synced_data)
        self.handles.clear()
        self.off = True

    def _node(self, path: str) -> Node:
        node = self.root
        for name in filter(None, path.split("/")):
            if not node.is_dir or name not in node.entries:
                raise FuseOSError(errno.ENOENT)
            node = node.entries[name]
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        folder, name = os.path.split(path)
        parent = self._node(folder)
        if not parent.is_dir:
            raise FuseOSError(errno.ENOTDIR)
        return parent, name

    def _handle(self, node: Node) -> int:
        self.next_handle += 1
        self.handles[self.next_handle] = node
        return self.next_handle

    def _open_node(self, fh: int) -> Node:
        if fh not in self.handles:
            raise FuseOSError(errno.EBADF)
        return self.handles[fh]

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        node = self._node(path)
        kind = stat.S_IFDIR | 0o755 if node.is_dir else stat.S_IFREG | 0o644
        return {
            "st_mode": kind,
            "st_nlink": 2 if node.is_dir else 1,
            "st_size": len(node.data),
            "st_mtime": node.mtime,
            "st_ctime": node.mtime,
            "st_atime": node.mtime,
            "st_uid": 0,
            "st_gid": 0,
        }

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *self._node(path).entries]

    def mkdir(self, path: str, mode: int) -> None:
        parent, name = self._parent(path)
        if name in parent.entries:
            raise FuseOSError(errno.EEXIST)
        parent.entries[name] = Node(is_dir=True)

    def rmdir(self, path: str) -> None:
        parent, name = self._parent(path)
        if self._node(path).entries:
            raise FuseOSError(errno.ENOTEMPTY)
        del parent.entries[name]

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        parent, name = self._parent(path)
        if name in parent.entries:
            raise FuseOSError(errno.EEXIST)
        parent.entries[name] = Node(is_dir=False)
        return self._handle(parent.entries[name])

    def open(self, path: str, flags: int) -> int:
        return self._handle(self._node(path))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return bytes(self._open_node(fh).data[offset : offset + size])

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        node = self._open_node(fh)
        if offset > len(node.data):
            node.data.extend(bytes(offset - len(node.data)))
        node.data[offset : offset + len(data)] = data
        node.mtime = time.time()
        return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> None:
        node = self._open_node(fh) if fh else self._node(path)
        del node.data[length:]
        node.data.extend(bytes(length - len(node.data)))
        node.mtime = time.time()

    def fsync(self, path: str, datasync: int, fh: int) -> None:
        node = self._open_node(fh)
        node.synced_data = bytes(node.data)

    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        node = self._node(path)
        node.synced_entries = dict(node.entries)

    def rename(self, old: str, new: str) -> None:
        old_parent, old_name = self._parent(old)
        node = self._node(old)
        new_parent, new_name = self._parent(new)
        if new_name in new_parent.entries and new_parent.entries[new_name].entries:
            raise FuseOSError(errno.ENOTEMPTY)
        del old_parent.entries[old_name]
        new_parent.entries[new_name] = node

    def link(self, target: str, source: str) -> None:
        parent, name = self._parent(target)
        if name in parent.entries:
            raise FuseOSError(errno.EEXIST)
        parent.entries[name] = self._node(source)

    def unlink(self, path: str) -> None:
        parent, name = self._parent(path)
        self._node(path)
        del parent.entries[name]

    def release(self, path: str, fh: int) -> None:
        self.handles.pop(fh, None)

    def chmod(self, path: str, mode: int) -> None:
        self._node(path)

    def chown(self, path: str, uid: int, gid: int) -> None:
        self._node(path)

    def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
        self._node(path).mtime = times[1] if times else time.time()

    def statfs(self, path: str) -> dict[str, int]:
        return {
            "f_bsize": 4096,
            "f_frsize": 4096,
            "f_blocks": 1 << 20,
            "f_bfree": 1 << 19,
            "f_bavail": 1 << 19,
            "f_namemax": 255,
        }

    def answer(self, line: str) -> str:
        """Carry out one command line; the reply."""
        word, _, rest = line.partition(" ")
        with self.mutex:
            if word == "count":
                return str(self.changes)
            if word == "cut-after":
                self.cut_in = int(rest)
                if self.cut_in == 0 and not self.off:
                    self.cut()
                return "ok"
            if word == "cut?":
                return "yes" if self.off else "no"
            if word == "save":
                with open(rest, "wb") as f:
                    pickle.dump(self.root.durable({}), f)
                return "ok"
        return f"unknown command {line!r}"


def _serve_commands(fs: PowerCutFs) -> None:
    for line in sys.stdin:
        print(fs.answer(line.strip()), flush=True)


def _load(state: str | None) -> Node:
    """A saved tree, all of it durable; or an empty root."""
    if state is None:
        return Node(is_dir=True)
    with open(state, "rb") as f:
        root: Node = pickle.load(f)
    for node in root.walk():
        node.synced_entries = dict(node.entries)
        node.synced_data = bytes(node.data)
    return root


def main() -> None:
    """Mount the filesystem at argv[1] and serve commands on stdin until it is unmounted."""
    fs = PowerCutFs(_load(sys.argv[2] if len(sys.argv) > 2 else None))
    threading.Thread(target=_serve_commands, args=(fs,), daemon=True).start()
    FUSE(
        fs,
        sys.argv[1],
        foreground=True,
        nothreads=True,
        direct_io=True,
        hard_remove=True,
        big_writes=True,
        entry_timeout=0,
        attr_timeout=0,
        negative_timeout=0,
    )


if __name__ == "__main__":
    main()
