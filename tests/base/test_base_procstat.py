"""procstat against real processes: a live one, one that ended, a zombie, a reused pid."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from diskferry.base import procstat


def _wait_zombie(pid: int) -> procstat.ProcessStat:
    deadline = time.monotonic() + 20
    while True:
        stat = procstat.read(pid)
        assert stat is not None, f"process {pid} was reaped"
        if stat.zombie:
            return stat
        assert time.monotonic() < deadline, f"process {pid} never ended"
        time.sleep(0.02)


def test_a_live_process_is_the_same_process_while_it_runs() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        stat = procstat.read(child.pid)
        assert stat is not None and not stat.zombie
        assert stat.start_time == procstat.start_time(child.pid)
        mine = procstat.read(os.getpid())
        assert mine is not None and mine.start_time <= stat.start_time
        assert procstat.is_same(child.pid, stat.start_time)
    finally:
        child.kill()
        child.wait()


def test_a_reused_pid_has_another_start_time() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        started = procstat.start_time(child.pid)
        assert started is not None
        assert not procstat.is_same(child.pid, started + 1)
        assert not procstat.is_same(child.pid, started - 1)
    finally:
        child.kill()
        child.wait()


def test_a_process_that_ended_is_gone() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert procstat.read(child.pid) is None
    assert procstat.start_time(child.pid) is None


def test_a_zombie_is_no_longer_the_same_process() -> None:
    child = subprocess.Popen(["true"])
    try:
        zombie = _wait_zombie(child.pid)
        assert zombie.state == "Z"
        assert procstat.start_time(child.pid) is None
        assert not procstat.is_same(child.pid, zombie.start_time)
    finally:
        child.wait()


def test_a_command_name_with_parentheses_and_spaces_is_read_past(tmp_path: Path) -> None:
    tricky = tmp_path / "x) Z 1 2 (y"
    tricky.symlink_to("/bin/sleep")
    child = subprocess.Popen([str(tricky), "60"])
    try:
        deadline = time.monotonic() + 20
        while Path(f"/proc/{child.pid}/comm").read_text().strip() != tricky.name:
            assert time.monotonic() < deadline, "the child never took its tricky name"
            time.sleep(0.02)
        stat = procstat.read(child.pid)
        assert stat is not None and not stat.zombie
        assert procstat.is_same(child.pid, stat.start_time)
    finally:
        child.kill()
        child.wait()


def test_the_boot_id_is_this_boots() -> None:
    assert procstat.boot_id() == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert len(procstat.boot_id()) == 36


# the first thread leaves by the exit system call of one thread, not of the process: the
# other thread goes on, with the files they share, until the file `argv[1]` appears
_FIRST_THREAD_LEAVES = """
import ctypes, os, sys, threading, time
def wait():
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
threading.Thread(target=wait).start()
ctypes.CDLL(None).syscall({exit_call}, 0)
"""
_EXIT_CALL = {"x86_64": 60, "aarch64": 93}


def test_a_process_has_ended_only_once_its_last_thread_has(tmp_path: Path) -> None:
    release = tmp_path / "release"
    script = _FIRST_THREAD_LEAVES.format(exit_call=_EXIT_CALL[os.uname().machine])
    child = subprocess.Popen([sys.executable, "-c", script, str(release)])
    try:
        stat = _wait_zombie(child.pid)
        assert len(os.listdir(f"/proc/{child.pid}/task")) == 2
        assert not procstat.is_same(child.pid, stat.start_time)
        assert not procstat.has_ended(child.pid, stat.start_time)
        release.touch()
        deadline = time.monotonic() + 20
        while not procstat.has_ended(child.pid, stat.start_time):
            assert time.monotonic() < deadline, "the last thread never ended"
            time.sleep(0.02)
        assert procstat.read(child.pid) is not None  # ended, not yet reaped
    finally:
        release.touch()
        child.wait(20)
    assert procstat.has_ended(child.pid, stat.start_time)
