"""A worker's output files: what a job writes beside its job file for the control plane to read
once it ended (what a repository's chores read) or while it runs (a backup point's disks).

On this host the file is written (0600, replaced whole). In a Pod the job's folder is a Secret
mounted read-only and the worker has no API access, so when its runner names a key file in
OUTPUT_KEY_ENV the output goes to stdout, which is the Pod's log, framed so that nothing else
in the log can pass for it:

    diskferry-output <name> <n> <base64 of the n-th CHUNK bytes> <tag>
    diskferry-output <name> end <length> <sha256 hex> <tag>

`tag` is HMAC-SHA256, keyed with the job's key (random, in the job's Secret, never logged),
of the line before it, cut to 32 hex digits. The runner reads the Pod's log and keeps only
lines whose tag it checks (`framed_output`): an output whose lines are not all there, in
order, with their end (a log cut by rotation), is absent, never wrong. An output longer than
OUTPUT_LIMIT is refused (OutputTooLargeError): the runner reads a bounded part of a log, and
the kubelet rotates a log at 10 MiB by default.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

from diskferry.base.errors import DiskferryError

OUTPUT_KEY_ENV = "DISKFERRY_OUTPUT_KEY_FILE"
"""Names the file holding the job's key when the runner reads outputs from the log."""
MARK = "diskferry-output"
CHUNK = 2304
"""Bytes a line carries: a multiple of 3, so each line is base64 of its own (3072 characters)."""
OUTPUT_LIMIT = 6 << 20
"""The longest output framed into a log: 8 MiB of lines, under the kubelet's default rotation."""
TAG_CHARS = 32
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_writing = threading.Lock()


class OutputError(DiskferryError):
    """An output file could not be written, or framed."""

    reason = "OutputNotWritten"


class OutputTooLargeError(OutputError):
    """An output is longer than a Pod's log carries."""

    reason = "OutputTooLarge"


def is_frame(line: str) -> bool:
    """Whether `line` of a log carries an output, not something the worker logged."""
    return line.startswith(f"{MARK} ")


def _tag(key: bytes, line: str) -> str:
    return hmac.new(key, line.encode(), hashlib.sha256).hexdigest()[:TAG_CHARS]


def frame_lines(key: bytes, name: str, data: bytes) -> list[str]:
    """The lines, tagged with `key`, that carry `data` as the output `name`."""
    if not _NAME.match(name):
        raise OutputError(f"{name!r} is not a usable name for an output")
    if len(data) > OUTPUT_LIMIT:
        raise OutputTooLargeError(
            f"the output {name} ({len(data)} bytes) is longer than a worker's log carries "
            f"({OUTPUT_LIMIT} bytes)"
        )
    lines = [
        f"{MARK} {name} {n} {base64.b64encode(data[start : start + CHUNK]).decode()}"
        for n, start in enumerate(range(0, len(data), CHUNK))
    ]
    lines.append(f"{MARK} {name} end {len(data)} {hashlib.sha256(data).hexdigest()}")
    return [f"{line} {_tag(key, line)}" for line in lines]


def framed_output(lines: Iterable[str], key: bytes, name: str) -> bytes | None:
    """The last whole output `name` framed with `key` in `lines`, None when there is none."""
    found: bytes | None = None
    parts: list[bytes] | None = None
    size = 0
    for line in lines:
        body, _, tag = line.rstrip("\r").rpartition(" ")
        fields = body.split(" ")
        if len(fields) < 4 or fields[:2] != [MARK, name] or len(tag) != TAG_CHARS:
            continue
        if not hmac.compare_digest(tag, _tag(key, body)):
            continue  # not the worker's
        if fields[2] == "end" and len(fields) == 5:
            data = b"".join(parts or ())
            whole = (parts is not None or fields[3] == "0") and str(len(data)) == fields[3]
            if whole and hashlib.sha256(data).hexdigest() == fields[4]:
                found = data
            parts, size = None, 0
            continue
        try:
            n, chunk = int(fields[2]), base64.b64decode(fields[3], validate=True)
        except (ValueError, binascii.Error):
            parts = None
            continue
        if n == 0:
            parts, size = [], 0
        if parts is None or n != len(parts) or size + len(chunk) > OUTPUT_LIMIT:
            parts = None  # a line missing: this output is not whole
            continue
        parts.append(chunk)
        size += len(chunk)
    return found


def _key(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise OutputError(f"cannot read the key of the job's outputs: {e.strerror or e}") from None


def _write_file(path: str, data: bytes) -> None:
    """Replace the file `path` with `data` (0600; never through a symlink)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None


def write_output(path: str, data: bytes) -> None:
    """Write the output file `path` of the job: the file itself, or in a Pod whose runner names
    a key (OUTPUT_KEY_ENV) its lines on stdout, under its file name; OutputError when it
    cannot."""
    key_file = os.environ.get(OUTPUT_KEY_ENV)
    if not key_file:
        _write_file(path, data)
        return
    text = "".join(f"{line}\n" for line in frame_lines(_key(key_file), Path(path).name, data))
    with _writing:
        sys.stdout.write(text)
        sys.stdout.flush()
