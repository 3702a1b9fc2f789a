"""A worker's output files: written as files on this host, and in a Pod whose runner names a key
framed into stdout, whence only the whole output, tagged with that key, is read back: never a
line the key did not tag, never an output cut by the log's rotation."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from diskferry.worker.output import (
    OUTPUT_KEY_ENV,
    OUTPUT_LIMIT,
    OutputTooLargeError,
    frame_lines,
    framed_output,
    is_frame,
    write_output,
)

KEY = b"k" * 32
DATA = os.urandom(10_000)


def test_an_output_goes_through_a_log_whole_among_other_lines() -> None:
    lines = ["INFO chores started", *frame_lines(KEY, "read.json", DATA), "INFO done"]
    assert framed_output(lines, KEY, "read.json") == DATA
    assert all(len(line) < 4096 for line in lines)
    assert [line for line in lines if not is_frame(line)] == ["INFO chores started", "INFO done"]
    assert framed_output(lines, KEY, "other.json") is None
    assert framed_output(frame_lines(KEY, "empty.json", b""), KEY, "empty.json") == b""


def test_lines_another_key_tagged_are_not_taken() -> None:
    forged = frame_lines(b"x" * 32, "read.json", b'{"names": []}')
    assert framed_output(forged, KEY, "read.json") is None
    genuine = frame_lines(KEY, "read.json", DATA)
    assert framed_output([*genuine, *forged], KEY, "read.json") == DATA
    changed = [line.replace(" 1 ", " 1 A", 1) for line in genuine]
    assert framed_output(changed, KEY, "read.json") is None


def test_an_output_cut_by_the_log_s_rotation_is_absent_never_wrong() -> None:
    lines = frame_lines(KEY, "read.json", DATA)
    assert len(lines) > 3
    assert framed_output(lines[1:], KEY, "read.json") is None  # its start rotated away
    assert framed_output(lines[:-1], KEY, "read.json") is None  # its end not written
    assert framed_output(lines[:2] + lines[3:], KEY, "read.json") is None  # a line lost


def test_the_last_whole_write_of_an_output_is_read() -> None:
    first, second = frame_lines(KEY, "point.json", b"1"), frame_lines(KEY, "point.json", DATA)
    assert framed_output([*first, *second], KEY, "point.json") == DATA
    assert framed_output([*first, *second[:-1]], KEY, "point.json") == b"1"


def test_an_output_longer_than_a_log_carries_is_refused() -> None:
    with pytest.raises(OutputTooLargeError, match="longer than a worker's log carries"):
        frame_lines(KEY, "read.json", bytes(OUTPUT_LIMIT + 1))


def test_here_an_output_is_a_file_and_in_a_pod_lines_on_stdout(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.delenv(OUTPUT_KEY_ENV, raising=False)
    write_output(str(tmp_path / "read.json"), DATA)
    assert (tmp_path / "read.json").read_bytes() == DATA
    assert stat.S_IMODE((tmp_path / "read.json").stat().st_mode) == 0o600
    assert capsys.readouterr().out == ""

    (tmp_path / "output.key").write_bytes(KEY)
    monkeypatch.setenv(OUTPUT_KEY_ENV, str(tmp_path / "output.key"))
    write_output(str(tmp_path / "point.json"), DATA)
    assert not (tmp_path / "point.json").exists()
    out = capsys.readouterr().out
    assert framed_output(out.splitlines(), KEY, "point.json") == DATA
    assert KEY.decode() not in out
