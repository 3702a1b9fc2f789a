"""Reading `strace -f -y` output: the file system calls a command made, with the paths they touched.

Lines of several threads interleave (`<unfinished ...>` then `<... name resumed>`); each
call keeps the line it started on and the line it ended on, so "A before B" is
`a.end < b.start`. Only calls that succeeded are kept.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

# what the durability checks read: file creation, data written, syncs, names made and removed
TRACED = (
    "open,openat,creat,write,pwrite64,writev,pwritev,pwritev2,fsync,fdatasync,"
    "rename,renameat,renameat2,link,linkat,unlink,unlinkat,mkdir,mkdirat"
)
_STRACE = ["strace", "-f", "-qq", "-y", "-s", "0", "--seccomp-bpf", "-e", f"trace={TRACED}"]
_LINE = re.compile(r"(\d+)\s+(.*)")
_RESUMED = re.compile(r"<\.\.\. (\w+) resumed>(.*)")
_CALL = re.compile(r"(\w+)\((.*)\)\s+=\s+(.*)")
_FD = re.compile(r"(?:\d+|AT_FDCWD)<(.*)>")
_UNFINISHED = "<unfinished ...>"
_PAIRS = {'"': '"', "<": ">", "[": "]", "{": "}", "(": ")"}
# (path argument, its directory fd argument or None) of each call that names a path
_PATHS = {
    "open": [(0, None)],
    "creat": [(0, None)],
    "openat": [(1, 0)],
    "rename": [(0, None), (1, None)],
    "renameat": [(1, 0), (3, 2)],
    "renameat2": [(1, 0), (3, 2)],
    "link": [(0, None), (1, None)],
    "linkat": [(1, 0), (3, 2)],
    "unlink": [(0, None)],
    "unlinkat": [(1, 0)],
    "mkdir": [(0, None)],
    "mkdirat": [(1, 0)],
}
_WRITES = {"write", "pwrite64", "writev", "pwritev", "pwritev2"}


@dataclass(frozen=True)
class Op:
    """One successful call: what it did (open, write, sync, place, unlink, mkdir) and where."""

    kind: str
    path: str
    start: int
    end: int
    source: str = ""  # for `place`: the name that was moved or linked to `path`


def run_traced(trace: Path, command: list[str], env: dict[str, str]) -> str:
    """Run `command` under strace, following its threads and children, into `trace`; its stdout."""
    proc = subprocess.run(
        [*_STRACE, "-o", str(trace), *command],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def read_ops(trace: Path) -> list[Op]:
    """The file system operations in the trace, in the order they started."""
    pending: dict[int, tuple[int, str]] = {}
    ops: list[Op] = []
    for number, line in enumerate(trace.read_text(errors="replace").splitlines()):
        match = _LINE.fullmatch(line)
        if match is None:
            continue
        pid, body = int(match[1]), match[2]
        if body.endswith(_UNFINISHED):
            pending[pid] = (number, body.removesuffix(_UNFINISHED).rstrip())
            continue
        start = number
        resumed = _RESUMED.match(body)
        if resumed is not None:
            if pid not in pending:
                continue
            start, head = pending.pop(pid)
            body = head + resumed[2]
        call = _CALL.fullmatch(body)
        if call is None or call[3].startswith("-1 "):
            continue
        ops.extend(_ops(call[1], _split(call[2]), call[3], start, number))
    return sorted(ops, key=lambda op: op.start)


def _ops(name: str, args: list[str], result: str, start: int, end: int) -> list[Op]:
    if name in _WRITES:
        return [Op("write", _fd_path(args[0]), start, end)]
    if name in ("fsync", "fdatasync"):
        return [Op("sync", _fd_path(args[0]), start, end)]
    paths = [_path(args, at, fd) for at, fd in _PATHS.get(name, [])]
    if name in ("open", "openat", "creat"):
        flags = "O_WRONLY" if name == "creat" else args[2 if name == "openat" else 1]
        if "O_WRONLY" in flags or "O_RDWR" in flags:
            return [Op("open", _fd_path(result) or paths[0], start, end)]
        return []
    if name in ("rename", "renameat", "renameat2", "link", "linkat"):
        return [Op("place", paths[1], start, end, source=paths[0])]
    if name in ("unlink", "unlinkat"):
        return [] if "AT_REMOVEDIR" in args[-1] else [Op("unlink", paths[0], start, end)]
    return [Op("mkdir", paths[0], start, end)]


def _split(args: str) -> list[str]:
    """The top-level arguments of a call, respecting quotes and brackets."""
    out, depth, current, quoted, escaped = [], [], [], False, False
    for ch in args:
        if quoted:
            current.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
            continue
        if ch == '"':
            quoted = True
        elif ch in _PAIRS:
            depth.append(_PAIRS[ch])
        elif depth and ch == depth[-1]:
            depth.pop()
        elif ch == "," and not depth:
            out.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    out.append("".join(current).strip())
    return out


def _fd_path(arg: str) -> str:
    match = _FD.fullmatch(arg.strip())
    return os.path.normpath(match[1]) if match else ""


def _path(args: list[str], at: int, dir_fd: int | None) -> str:
    text = args[at].removesuffix("...")
    path = os.fsdecode(ast.literal_eval("b" + text))
    if not os.path.isabs(path) and dir_fd is not None:
        path = os.path.join(_fd_path(args[dir_fd]), path)
    return os.path.normpath(path)
