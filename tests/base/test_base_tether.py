"""tether: children that outlive the thread that started them, and end with the process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from diskferry.base import procstat, tether


def _wait_gone(pid: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while procstat.start_time(pid) is not None:
        assert time.monotonic() < deadline, f"process {pid} is still alive"
        time.sleep(0.05)


def test_a_child_outlives_the_thread_that_started_it() -> None:
    started: list[subprocess.Popen[bytes]] = []
    starter = threading.Thread(target=lambda: started.append(tether.start(["sleep", "60"])))
    starter.start()
    starter.join()
    child = started[0]
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(2)
    finally:
        child.kill()
        child.wait()


def test_a_child_ends_when_its_process_is_killed() -> None:
    script = (
        "import threading, time\n"
        "from diskferry.base import tether\n"
        "started = []\n"
        "t = threading.Thread(target=lambda: started.append(tether.start(['sleep', '60'])))\n"
        "t.start()\n"
        "t.join()\n"
        "print(started[0].pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        assert procstat.start_time(child_pid) is not None
    finally:
        parent.kill()
        parent.wait()
    _wait_gone(child_pid)


def test_the_child_is_the_program_in_a_process_group_of_its_own() -> None:
    child = tether.start(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while os.readlink(f"/proc/{child.pid}/exe") != "/usr/bin/cat":
            assert time.monotonic() < deadline, "setpriv never ran the program"
            time.sleep(0.02)
        assert os.getpgid(child.pid) == child.pid
        out, _ = child.communicate(b"through the pipes\n", timeout=20)
        assert out == b"through the pipes\n"
        assert child.returncode == 0
    finally:
        child.kill()
        child.wait()


def test_a_missing_program_raises_as_popen_does() -> None:
    with pytest.raises(FileNotFoundError) as caught:
        tether.start(["diskferry-no-such-program"])
    assert caught.value.filename == "diskferry-no-such-program"


def _running_with(text: str) -> list[int]:
    """The pids of the processes whose command line holds `text`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_a_child_whose_process_dies_before_the_signal_is_armed_runs_nothing(tmp_path) -> None:
    slow = tmp_path / "bin"
    slow.mkdir()
    arming = tmp_path / "arming"
    setpriv = shutil.which("setpriv")
    (slow / "setpriv").write_text(
        f"#!/bin/sh\nwhile [ ! -e {arming}.go ]; do sleep 0.01; done\n"
        f'touch {arming}\nexec {setpriv} "$@"\n'
    )
    (slow / "setpriv").chmod(0o755)
    marker = tmp_path / "ran"
    script = f"from diskferry.base import tether\ntether.start(['touch', {str(marker)!r}])\n"
    env = {**os.environ, "PATH": f"{slow}:{os.environ['PATH']}"}
    parent = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 20
    while not _running_with(str(slow / "setpriv")):
        assert time.monotonic() < deadline, "the slow setpriv never ran"
        time.sleep(0.01)
    parent.kill()  # before setpriv has armed the signal
    parent.wait()
    Path(f"{arming}.go").touch()
    while not arming.exists() or _running_with(str(marker)):
        assert time.monotonic() < deadline, "the orphan never ended"
        time.sleep(0.01)
    assert not marker.exists()
