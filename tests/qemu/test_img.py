"""How qemu-img runs: limits in force, no preexec_fn, cancel of a stalled run, its errors."""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from qemu_helpers import MiB

from diskferry.base import procstat
from diskferry.base.errors import CancelledError
from diskferry.qemu import cbt, img
from diskferry.qemu.session import BackupSession, SessionDisk

_OPENAT = {"x86_64": 257, "aarch64": 56}[platform.machine()]


def _qemu_img_child(timeout: float = 20.0) -> int:
    """The pid of this process's qemu-img child, once it runs qemu-img itself."""
    deadline = time.monotonic() + timeout
    while True:
        for children in Path("/proc/self/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for pid in children.read_text().split():
                    if os.readlink(f"/proc/{pid}/exe").endswith("/qemu-img"):
                        return int(pid)
        assert time.monotonic() < deadline, "no qemu-img child appeared"
        time.sleep(0.02)


def _wait_blocked_opening(pid: int, timeout: float = 20.0) -> None:
    """Wait until process `pid` waits in openat(2), as qemu-img does on a FIFO no one writes."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}/syscall").read_text().split()[0] != str(_OPENAT):
        assert time.monotonic() < deadline, f"process {pid} never waited to open a file"
        time.sleep(0.02)


def _release(fifo: Path, timeout: float = 20.0) -> None:
    """Let a qemu-img waiting to open `fifo` go on: it then finds it is no regular file.

    Until the reader has opened the FIFO a non-blocking writer gets ENXIO: try again.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            return
        except OSError as e:
            if e.errno != errno.ENXIO:
                return
        time.sleep(0.02)


def _in_thread(call: Any) -> tuple[threading.Thread, list[BaseException]]:
    raised: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as e:
            raised.append(e)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, raised


def _program(args: list[str]) -> str:
    """The program a child runs: past setpriv and the shell that checks its parent."""
    if "--" not in args:
        return args[0]
    rest = args[args.index("--") + 1 :]
    if rest[:2] == ["/bin/sh", "-c"]:
        rest = rest[5:]  # the script, its $0 and the parent's pid
    return rest[0]


def test_no_child_is_started_with_a_preexec_fn(
    volume: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[tuple[list[str], dict[str, Any]]] = []

    class RecordingPopen(subprocess.Popen[bytes]):
        def __init__(self, args: list[str], **kwargs: Any) -> None:
            started.append((list(args), kwargs))
            super().__init__(args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", RecordingPopen)
    image = str(tmp_path / "image.qcow2")
    img.run(["create", "-q", "-f", "qcow2", image, str(4 * MiB)], image)
    assert img.info(image).format == "qcow2"
    assert img.check(image, "qcow2") is None
    converted = str(tmp_path / "converted.raw")
    img.convert(image, converted, src_format="qcow2", dst_format="raw")
    img.resize(converted, 8 * MiB, "raw")
    assert img.compare(image, converted, "qcow2", "raw")
    cbt.enable(volume)
    cbt.reset_chain(volume)
    with BackupSession([SessionDisk("d", volume)], "repo1") as session:
        assert session.start({"d": None})[0].mode == "full"
    programs = [_program(args) for args, _ in started]
    assert programs.count("qemu-img") >= 9
    assert "qemu-storage-daemon" in programs
    assert [args for args, kwargs in started if kwargs.get("preexec_fn") is not None] == []


def test_a_probe_runs_under_its_limits_in_a_process_group_of_its_own(tmp_path: Path) -> None:
    fifo = tmp_path / "stalls"
    os.mkfifo(fifo)
    prober, raised = _in_thread(lambda: img.info(str(fifo)))
    try:
        pid = _qemu_img_child()
        limits = Path(f"/proc/{pid}/limits").read_text()
        cpu, memory = img.PROBE_LIMITS.cpu_seconds, img.PROBE_LIMITS.address_space
        assert re.search(rf"^Max cpu time\s+{cpu}\s+{cpu}\s+seconds", limits, re.M)
        assert re.search(rf"^Max address space\s+{memory}\s+{memory}\s+bytes", limits, re.M)
        assert os.getpgid(pid) == pid
    finally:
        _release(fifo)
        prober.join(20)
    assert not prober.is_alive()
    assert isinstance(raised[0], img.QemuImgError)
    assert "regular file" in raised[0].detail


def test_a_run_past_its_cpu_limit_says_so() -> None:
    busy = ["bench", "-q", "-c", "1000000000", "--image-opts", "driver=null-co,size=1G"]
    with pytest.raises(img.QemuImgError) as caught:
        img.run(busy, "benchmarking", limits=img.Limits(cpu_seconds=1))
    assert str(caught.value) == "benchmarking: qemu-img ran out of its CPU time limit"


def test_a_stalled_convert_is_cancelled_and_its_qemu_img_ended(tmp_path: Path) -> None:
    fifo = tmp_path / "stalls"
    os.mkfifo(fifo)
    cancel = threading.Event()
    converter, raised = _in_thread(
        lambda: img.convert(
            str(fifo), str(tmp_path / "out.raw"), src_format="raw", dst_format="raw", cancel=cancel
        )
    )
    pid = _qemu_img_child()
    try:
        _wait_blocked_opening(pid)
        cancel.set()
        converter.join(20)
        assert not converter.is_alive(), "cancel did not stop a qemu-img that prints nothing"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        converter.join()
    assert isinstance(raised[0], CancelledError)
    assert procstat.read(pid) is None


def test_an_error_names_what_was_run_and_the_reason_qemu_img_gave(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.qcow2")
    with pytest.raises(img.QemuImgError) as caught:
        img.info(missing)
    assert caught.value.detail == "No such file or directory"
    assert str(caught.value) == f"{missing}: No such file or directory"


def _logging_qemu_img(tmp_path: Path) -> tuple[str, Path]:
    """A qemu-img that writes each command line it is given to a log, then runs the real one."""
    log = tmp_path / "runs.log"
    wrapper = tmp_path / "qemu-img"
    wrapper.write_text(f'#!/bin/sh\necho "$1" >> {log}\nexec qemu-img "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper), log


@pytest.mark.parametrize(("fmt", "runs"), [("raw", 0), ("vhd", 0), ("qcow2", 1), ("vmdk", 1)])
def test_check_runs_qemu_img_only_for_a_format_it_can_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, runs: int
) -> None:
    image = tmp_path / f"disk.{fmt}"
    img.run(["create", "-q", "-f", img.qemu_format(fmt), str(image), "4M"], "create")
    wrapper, log = _logging_qemu_img(tmp_path)
    monkeypatch.setattr(img, "QEMU_IMG", wrapper)
    assert img.check(str(image), fmt) is None
    checks = log.read_text().split() if log.exists() else []
    assert checks == ["check"] * runs


def test_check_still_finds_a_damaged_qcow2(tmp_path: Path) -> None:
    image = tmp_path / "disk.qcow2"
    img.run(["create", "-q", "-f", "qcow2", str(image), "4M"], "create")
    subprocess.run(
        ["qemu-io", "-c", "write -P 1 0 1M", str(image)], check=True, capture_output=True
    )
    with open(image, "r+b") as f:  # the L1 table names an L2 table past the end
        f.seek(0x30000)
        f.write((1 << 63 | 1 << 40).to_bytes(8, "big"))
    assert img.check(str(image), "qcow2") is not None


def _converting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, refuse: bool) -> Path:
    """Put in a qemu-img that logs each command line whole and then runs the real one or,
    with `refuse`, fails where io_uring is asked as qemu does where the kernel refuses it;
    the process has not been refused io_uring yet. The log's path."""
    log = tmp_path / "convert.log"
    wrapper = tmp_path / "qemu-img"
    refusal = (
        'case "$*" in *aio=io_uring*)\n'
        "  echo \"qemu-img: Could not open 'x': Unable to use io_uring: "
        'Operation not permitted" >&2; exit 1;;\n'
        "esac\n"
    )
    wrapper.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n{refusal if refuse else ""}exec qemu-img "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setattr(img, "QEMU_IMG", str(wrapper))
    monkeypatch.setattr(img, "_io_uring_refused", False)
    return log


def _qcow2_with_data(path: Path) -> None:
    img.run(["create", "-q", "-f", "qcow2", str(path), "4M"], "create")
    subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", "write -P 0x42 4096 8192", str(path)], check=True
    )


def _holds_the_data(raw: Path) -> bool:
    data = raw.read_bytes()
    return (
        len(data) == 4 * MiB
        and data[4096:12288] == b"\x42" * 8192
        and data.count(0) == 4 * MiB - 8192
    )


def test_convert_reads_through_io_uring_a_file_whose_name_has_commas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "a,b,,c.qcow2"
    _qcow2_with_data(source)
    log = _converting(tmp_path, monkeypatch, refuse=False)
    out = tmp_path / "out.raw"
    img.convert(str(source), str(out), src_format="qcow2", dst_format="raw")
    (run,) = log.read_text().splitlines()
    assert "file.filename=" + str(source).replace(",", ",,") + ",file.aio=io_uring" in run
    assert _holds_the_data(out)


def test_convert_reads_through_the_thread_pool_where_io_uring_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "disk.qcow2"
    _qcow2_with_data(source)
    log = _converting(tmp_path, monkeypatch, refuse=True)
    for name in ("first.raw", "second.raw"):
        img.convert(str(source), str(tmp_path / name), src_format="qcow2", dst_format="raw")
        assert _holds_the_data(tmp_path / name)
    runs = log.read_text().splitlines()
    # once refused, the second conversion asks no more
    assert ["aio=io_uring" in run for run in runs] == [True, False, False]


def test_an_image_on_a_block_device_converts_through_io_uring(tmp_path: Path, loop_device) -> None:
    device = loop_device(8 * MiB)
    image = tmp_path / "disk.qcow2"
    _qcow2_with_data(image)
    with open(device, "r+b") as dev:
        dev.write(image.read_bytes())
    out = tmp_path / "out.raw"
    img.convert(device, str(out), src_format="qcow2", dst_format="raw")
    assert _holds_the_data(out)
