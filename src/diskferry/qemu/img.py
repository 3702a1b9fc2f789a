"""qemu-img: every run of it, through `run`; info, check, convert with progress, resize, compare.

Each run is a child tethered to this process (it ends when diskferry does), in a process
group of its own; untrusted images are probed under CPU-time and address-space limits,
which util-linux's prlimit sets before it execs qemu-img.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import threading
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

from diskferry.base import tether
from diskferry.base.errors import CancelledError, DiskferryError
from diskferry.disk.file_volume import is_block_device
from diskferry.disk.progress import Progress

QEMU_IMG = "qemu-img"
_PERCENT = re.compile(rb"\((\d+(?:\.\d+)?)/100%\)")
# "Could not open 'PATH': " that qemu-img says once per layer before the reason
_OPENING = re.compile(r"^(?:Could not open '[^']*': )+")
# `qemu-img check` exits with this for formats it cannot check; 3 means leaked clusters only
_CHECK_UNSUPPORTED = 63
# the formats (qemu-img's names) it has no check for, so that it is not run for them
_UNCHECKABLE = frozenset({"raw", "vpc"})
# diskferry's format names that qemu-img spells otherwise
_QEMU_NAMES = {"vhd": "vpc", "iso": "raw"}
# how often a waiting run looks at its cancel event
_CANCEL_POLL_SECONDS = 0.1
# what qemu says when the kernel (or a seccomp profile) refuses it io_uring
_IO_URING_REFUSED = "Unable to use io_uring"
# set once qemu said so: this process reads through qemu's thread pool from then on
_io_uring_refused = False


@dataclass(frozen=True)
class Limits:
    """Resource limits of one qemu-img run: seconds of CPU time, bytes of address space."""

    cpu_seconds: int | None = None
    address_space: int | None = None

    def command(self, args: list[str]) -> list[str]:
        """`args` as run under these limits: through prlimit, or as they are when there are none."""
        wanted = []
        if self.cpu_seconds is not None:
            wanted.append(f"--cpu={self.cpu_seconds}")
        if self.address_space is not None:
            wanted.append(f"--as={self.address_space}")
        return ["prlimit", *wanted, "--", *args] if wanted else args


NO_LIMITS = Limits()
# As OpenStack probes untrusted images: 30 s of CPU and 1 GiB of address space.
PROBE_LIMITS = Limits(cpu_seconds=30, address_space=1 << 30)
CONVERT_LIMITS = Limits(address_space=4 << 30)


class QemuImgError(DiskferryError):
    """qemu-img failed; the message carries its last error line, `detail` that line alone.

    `stderr` holds all it printed there, when it ran to an exit code its caller refuses.
    """

    reason = "QemuImgFailed"

    def __init__(self, message: str, detail: str | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message
        self.stderr = stderr


@dataclass(frozen=True)
class Finished:
    """A qemu-img run that ended with an exit code its caller accepts, and what it printed."""

    returncode: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class ImageInfo:
    """What `qemu-img info` says of an image."""

    format: str
    virtual_size: int
    actual_size: int
    backing_file: str | None
    data_file: str | None
    encrypted: bool
    raw: dict[str, Any]


def qemu_format(fmt: str) -> str:
    """The name qemu-img gives the format diskferry calls `fmt`."""
    return _QEMU_NAMES.get(fmt, fmt)


def _error_line(stderr: bytes, fallback: str) -> str:
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    if not lines:
        return fallback
    return _OPENING.sub("", lines[-1].removeprefix("qemu-img: "))


def run(
    args: list[str],
    what: str,
    *,
    limits: Limits = NO_LIMITS,
    accept: Container[int] | None = (0,),
    cancel: threading.Event | None = None,
    on_output: Callable[[bytes], None] | None = None,
) -> Finished:
    """Run `qemu-img ARGS`; an exit code not in `accept` (None: any) raises "WHAT: its reason".

    `on_output` gets its standard output as it comes. Setting `cancel` kills it and raises
    CancelledError, and so does any exception while it runs: no qemu-img is left behind.
    """
    try:
        proc = tether.start(
            limits.command([QEMU_IMG, *args]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as e:
        raise QemuImgError(f"{what}: cannot run {QEMU_IMG}: {e.strerror}") from e
    with proc:  # closes the pipes and reaps it
        try:
            stdout, stderr = _collect(proc, cancel, on_output)
        except BaseException:
            proc.kill()
            raise
    killed = proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL)
    if killed and limits.cpu_seconds is not None:
        detail = "qemu-img ran out of its CPU time limit"
        raise QemuImgError(f"{what}: {detail}", detail)
    if accept is not None and proc.returncode not in accept:
        detail = _error_line(stderr, "qemu-img failed")
        raise QemuImgError(f"{what}: {detail}", detail, stderr.decode("utf-8", "replace"))
    return Finished(proc.returncode, stdout, stderr)


def _collect(
    proc: subprocess.Popen[bytes],
    cancel: threading.Event | None,
    on_output: Callable[[bytes], None] | None,
) -> tuple[bytes, bytes]:
    """What the child prints on stdout and stderr, until it closes both; stop on `cancel`."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.fileno(), proc.stderr.fileno()
    printed = {out: bytearray(), err: bytearray()}
    poll = None if cancel is None else _CANCEL_POLL_SECONDS
    with selectors.DefaultSelector() as selector:
        for fd in printed:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            if cancel is not None and cancel.is_set():
                raise CancelledError("cancelled")
            for key, _ in selector.select(poll):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                printed[key.fd] += chunk
                if on_output is not None and key.fd == out:
                    on_output(chunk)
    return bytes(printed[out]), bytes(printed[err])


def info(path: str, fmt: str | None = None, *, untrusted: bool = True) -> ImageInfo:
    """`qemu-img info --output=json`, under strict limits when the image is untrusted."""
    args = ["info", "--output=json", "--force-share"]
    if fmt:
        args += ["-f", qemu_format(fmt)]
    limits = PROBE_LIMITS if untrusted else NO_LIMITS
    data = json.loads(run([*args, path], path, limits=limits).stdout)
    specific = data.get("format-specific", {}).get("data", {})
    return ImageInfo(
        format=data["format"],
        virtual_size=int(data["virtual-size"]),
        actual_size=int(data.get("actual-size", 0)),
        backing_file=data.get("backing-filename") or data.get("full-backing-filename"),
        data_file=specific.get("data-file") or _foreign_extent(path, specific),
        encrypted=bool(data.get("encrypted", False)),
        raw=data,
    )


def _foreign_extent(path: str, specific: dict[str, Any]) -> str | None:
    """The first VMDK extent kept in a file other than the image itself."""
    own = os.path.realpath(path)
    for extent in specific.get("extents", []):
        name = extent.get("filename")
        if name and os.path.realpath(name) != own:
            return name
    return None


def check(path: str, fmt: str) -> str | None:
    """What `qemu-img check` finds wrong in an untrusted image (damage, truncation), or None.

    A format qemu-img cannot check (raw, vhd) is not probed a second time.
    """
    if qemu_format(fmt) in _UNCHECKABLE:
        return None
    args = ["check", "--output=json", "--force-share", "-f", qemu_format(fmt), path]
    done = run(args, path, limits=PROBE_LIMITS, accept=None)
    if done.returncode in (0, 3, _CHECK_UNSUPPORTED):
        return None
    if done.returncode == 2:
        found = json.loads(done.stdout).get("corruptions", 0)
        return f"qemu-img check found {found} corruptions"
    errors = [ln for ln in done.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    return errors[0].removeprefix("ERROR: ") if errors else "qemu-img check failed"


def convert(
    src: str,
    dst: str,
    *,
    src_format: str,
    dst_format: str,
    progress: Progress | None = None,
    progress_share: int = 0,
    target_exists: bool = False,
    direct: bool = False,
    cancel: threading.Event | None = None,
) -> None:
    """`qemu-img convert -p`; its percent adds up to `progress_share` bytes of `progress`.

    The source is read through io_uring where the kernel lets qemu use it, and through
    qemu's thread pool where it does not. `direct` writes the target around the page cache
    (`-t none`, O_DIRECT).
    """
    global _io_uring_refused
    target = ["-O", qemu_format(dst_format)]
    if direct:
        target += ["-t", "none"]
    if target_exists:
        target.append("-n")
    if not _io_uring_refused:
        source = ["--image-opts", _io_uring_source(src, src_format)]
        try:
            _convert([*source, *target], src, dst, progress, progress_share, cancel)
            return
        except QemuImgError as e:
            if _IO_URING_REFUSED not in e.stderr:
                raise
            _io_uring_refused = True
    source = ["-f", qemu_format(src_format), src]
    _convert([*source, *target], src, dst, progress, progress_share, cancel)


def _io_uring_source(path: str, fmt: str) -> str:
    """`--image-opts` of the image file at `path` in format `fmt`, read through io_uring."""
    protocol = "host_device" if is_block_device(path) else "file"
    escaped = path.replace(",", ",,")
    return (
        f"driver={qemu_format(fmt)},file.driver={protocol},file.filename={escaped},"
        "file.aio=io_uring"
    )


def _convert(
    options: list[str],
    src: str,
    dst: str,
    progress: Progress | None,
    progress_share: int,
    cancel: threading.Event | None,
) -> None:
    args = ["convert", "-p", "-W", "-m", "8", *options, dst]
    reported = 0
    tail = b""

    def advance(chunk: bytes) -> None:
        nonlocal reported, tail
        tail = (tail + chunk)[-256:]
        found = _PERCENT.findall(tail)
        if found and progress is not None and progress_share:
            now = int(float(found[-1]) / 100 * progress_share)
            if now > reported:
                progress.add(now - reported)
                reported = now

    run(args, f"converting {src}", limits=CONVERT_LIMITS, cancel=cancel, on_output=advance)
    if progress is not None and progress_share > reported:
        progress.add(progress_share - reported)


def resize(path: str, size: int, fmt: str) -> None:
    """Grow an image to `size` bytes."""
    run(["resize", "-f", fmt, path, str(size)], path)


def compare(a: str, b: str, fmt_a: str | None = None, fmt_b: str | None = None) -> bool:
    """Whether two images have equal contents (`qemu-img compare`)."""
    args = ["compare", "-q"]
    if fmt_a:
        args += ["-f", fmt_a]
    if fmt_b:
        args += ["-F", fmt_b]
    return run([*args, a, b], f"comparing {a} and {b}", accept=(0, 1)).returncode == 0
