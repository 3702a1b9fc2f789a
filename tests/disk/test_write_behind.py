"""Write-behind: every range written is sent to the disk, and the ones a window behind are
waited for and dropped from the page cache; where there is no sync_file_range it stays off."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from diskferry.disk.errors import VolumeError
from diskferry.disk.write_behind import WINDOW, WriteBehind

MIB = 1 << 20
_WRITER = """
import sys
from diskferry.disk.file_volume import FileVolume
path, count, behind = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "on"
with FileVolume.create(path, count << 20, write_behind=behind) as vol:
    for i in range(count):
        vol.write(i << 20, bytes([i % 251 + 1]) * (1 << 20))
    vol.flush()
"""


def _traced(tmp_path: Path, count: int, behind: bool = True) -> list[str]:
    """The sync_file_range and fadvise64 calls of a process writing `count` MiB."""
    trace = tmp_path / "trace"
    out = tmp_path / "out.raw"
    command = ["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=sync_file_range,fadvise64"]
    command += [sys.executable, "-c", _WRITER, str(out), str(count), "on" if behind else "off"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run(command, check=True, env=env)
    with out.open("rb") as f:
        for i in range(count):
            assert f.read(MIB) == bytes([i % 251 + 1]) * MIB
    return [line for line in trace.read_text().splitlines() if "= 0" in line]


def test_each_write_is_started_and_the_old_ones_settled_and_dropped(tmp_path: Path) -> None:
    count = WINDOW // MIB + 16
    calls = _traced(tmp_path, count)
    started = [c for c in calls if "SYNC_FILE_RANGE_WRITE)" in c and "WAIT" not in c]
    waited = [c for c in calls if "SYNC_FILE_RANGE_WAIT_BEFORE" in c]
    dropped = [c for c in calls if "POSIX_FADV_DONTNEED" in c]
    offsets = sorted(int(re.search(r"sync_file_range\(\d+, (\d+),", c)[1]) for c in started)
    assert offsets == [i * MIB for i in range(count)]
    # the window holds the last 32 MiB; every range before it was waited for, then dropped
    assert len(waited) == len(dropped) == count - WINDOW // MIB
    assert re.search(r", 0, 1048576,", waited[0]) and re.search(r", 0, 1048576,", dropped[0])


def test_off_where_the_descriptor_has_no_writeback(tmp_path: Path) -> None:
    read, write = os.pipe()
    try:
        behind = WriteBehind(write, "a pipe")
        behind.written(0, MIB)
        assert behind.enabled is False
    finally:
        os.close(read)
        os.close(write)


def test_a_failed_writeback_names_the_file(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "gone", os.O_RDWR | os.O_CREAT)
    os.close(fd)
    with pytest.raises(VolumeError, match=r"gone.*writing back 4096 bytes at offset 0"):
        WriteBehind(fd, str(tmp_path / "gone")).written(0, 4096)


def test_a_plain_volume_leaves_writeback_to_the_kernel(tmp_path: Path) -> None:
    assert _traced(tmp_path, 8, behind=False) == []
