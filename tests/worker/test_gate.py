"""The gate a worker starts behind: released, it runs the module as `python -m` would, in the
same process, with its stdin at EOF; with its stdin closed first, it runs nothing and leaves
its mark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from diskferry.worker.gate import NEVER_RAN, RELEASE

_PROBE = """
import os, sys
if __name__ == "__main__":
    print(os.getpid(), repr(sys.stdin.read()), sys.argv[1:], flush=True)
"""


def _gated(directory: Path) -> subprocess.Popen[bytes]:
    (directory / "probe.py").write_text(_PROBE)
    return subprocess.Popen(
        [sys.executable, "-m", "diskferry.worker.gate", "probe", "job.json"],
        cwd=directory,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )


def test_a_released_worker_runs_in_the_same_process_with_stdin_at_eof(tmp_path: Path) -> None:
    gated = _gated(tmp_path)
    assert gated.stdin is not None and gated.stdout is not None
    gated.stdin.write(RELEASE)
    gated.stdin.flush()
    # the pipe stays open: the worker reads EOF all the same
    assert gated.wait(timeout=30) == 0
    assert gated.stdout.read().decode().split() == [str(gated.pid), "''", "['job.json']"]
    gated.stdin.close()
    assert not (tmp_path / NEVER_RAN).exists()


def test_a_worker_whose_starter_died_first_runs_nothing(tmp_path: Path) -> None:
    gated = _gated(tmp_path)
    assert gated.stdin is not None and gated.stdout is not None
    gated.stdin.close()
    assert gated.wait(timeout=30) == 0
    assert gated.stdout.read() == b""
    assert (tmp_path / NEVER_RAN).stat().st_mode & 0o777 == 0o600
