"""qemu-img: info, convert (with progress), resize and compare, run under resource limits."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

from diskferry.disk.errors import CancelledError, DiskferryError
from diskferry.disk.progress import Progress

QEMU_IMG = "qemu-img"
# As OpenStack probes untrusted images: 30 s of CPU and 1 GiB of address space.
PROBE_LIMITS = (30, 1 << 30)
CONVERT_LIMITS = (None, 4 << 30)
_PERCENT = re.compile(rb"\((\d+(?:\.\d+)?)/100%\)")
# "Could not open 'PATH': " that qemu-img says once per layer before the reason
_OPENING = re.compile(r"^(?:Could not open '[^']*': )+")
# `qemu-img check` exits with this for formats it cannot check; 3 means leaked clusters only
_CHECK_UNSUPPORTED = 63
# diskferry's format names that qemu-img spells otherwise
_QEMU_NAMES = {"vhd": "vpc", "iso": "raw"}


class QemuImgError(DiskferryError):
    """qemu-img failed; the message carries its last error line, `detail` that line alone."""

    reason = "QemuImgFailed"

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail or message


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


def _limiter(cpu: int | None, memory: int | None):
    def apply() -> None:
        if cpu is not None:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        os.setpgrp()

    return apply


def _error_line(stderr: bytes, fallback: str) -> str:
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    if not lines:
        return fallback
    return _OPENING.sub("", lines[-1].removeprefix("qemu-img: "))


def _run(args: list[str], limits: tuple[int | None, int | None], what: str) -> bytes:
    proc = subprocess.run(
        [QEMU_IMG, *args],
        capture_output=True,
        preexec_fn=_limiter(*limits),
        check=False,
    )
    if proc.returncode == -signal.SIGXCPU or proc.returncode == -signal.SIGKILL:
        raise QemuImgError(f"{what}: qemu-img ran out of its CPU time limit")
    if proc.returncode != 0:
        detail = _error_line(proc.stderr, "qemu-img failed")
        raise QemuImgError(f"{what}: {detail}", detail)
    return proc.stdout


def info(path: str, fmt: str | None = None, *, untrusted: bool = True) -> ImageInfo:
    """`qemu-img info --output=json`, under strict limits when the image is untrusted."""
    args = ["info", "--output=json", "--force-share"]
    if fmt:
        args += ["-f", qemu_format(fmt)]
    data = json.loads(_run([*args, path], PROBE_LIMITS if untrusted else (None, None), path))
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
    """What `qemu-img check` finds wrong in an untrusted image (damage, truncation), or None."""
    proc = subprocess.run(
        [QEMU_IMG, "check", "--output=json", "--force-share", "-f", qemu_format(fmt), path],
        capture_output=True,
        preexec_fn=_limiter(*PROBE_LIMITS),
        check=False,
    )
    if proc.returncode in (0, 3, _CHECK_UNSUPPORTED):
        return None
    if proc.returncode == 2:
        found = json.loads(proc.stdout).get("corruptions", 0)
        return f"qemu-img check found {found} corruptions"
    errors = [ln for ln in proc.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
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
    cancel: threading.Event | None = None,
    extra: list[str] | None = None,
) -> None:
    """`qemu-img convert -p`; its percent adds up to `progress_share` bytes of `progress`."""
    args = [QEMU_IMG, "convert", "-p", "-W", "-m", "8", "-f", qemu_format(src_format)]
    args += ["-O", qemu_format(dst_format)]
    if target_exists:
        args.append("-n")
    args += [*(extra or []), src, dst]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_limiter(*CONVERT_LIMITS),
    )
    stderr: list[bytes] = []
    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
    reader.start()
    reported = 0
    buf = b""
    assert proc.stdout is not None
    while True:
        if cancel is not None and cancel.is_set():
            proc.kill()
            proc.wait()
            raise CancelledError("cancelled")
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        buf = (buf + chunk)[-256:]
        found = _PERCENT.findall(buf)
        if found and progress is not None and progress_share:
            now = int(float(found[-1]) / 100 * progress_share)
            if now > reported:
                progress.add(now - reported)
                reported = now
    proc.wait()
    reader.join()
    if proc.returncode != 0:
        raise QemuImgError(f"converting {src}: {_error_line(b''.join(stderr), 'failed')}")
    if progress is not None and progress_share > reported:
        progress.add(progress_share - reported)


def resize(path: str, size: int, fmt: str) -> None:
    """Grow an image to `size` bytes."""
    _run(["resize", "-f", fmt, path, str(size)], (None, None), path)


def compare(a: str, b: str, fmt_a: str | None = None, fmt_b: str | None = None) -> bool:
    """Whether two images have equal contents (`qemu-img compare`)."""
    args = [QEMU_IMG, "compare", "-q"]
    if fmt_a:
        args += ["-f", fmt_a]
    if fmt_b:
        args += ["-F", fmt_b]
    proc = subprocess.run([*args, a, b], capture_output=True, check=False)
    if proc.returncode in (0, 1):
        return proc.returncode == 0
    raise QemuImgError(f"comparing {a} and {b}: {_error_line(proc.stderr, 'failed')}")
