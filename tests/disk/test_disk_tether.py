"""tether: children that outlive the thread that started them, and end with the process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from diskferry.disk import procstat, tether


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
        "from diskferry.disk import tether\n"
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
