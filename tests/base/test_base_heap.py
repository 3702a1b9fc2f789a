"""The C heap limited to a few arenas: threads that allocate at once share them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from diskferry.base.heap import ARENAS

# Eight threads allocate at once and hold what they took; then glibc's malloc_info tells how
# many arenas the heap has.
_CHILD = """
import ctypes, sys, threading
from diskferry.base.heap import limit_arenas
from diskferry.base.libc import LIBC as libc
if sys.argv[1] == "limit":
    assert limit_arenas()
barrier = threading.Barrier(8)
held = []
def take():
    held.append(bytearray(64 << 10))
    barrier.wait()
threads = [threading.Thread(target=take) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
report = libc.fopen(sys.argv[2].encode(), b"w")
libc.malloc_info(0, report)
libc.fclose(report)
"""


def _arenas(tmp_path: Path, mode: str) -> int:
    report = tmp_path / f"{mode}.xml"
    subprocess.run([sys.executable, "-c", _CHILD, mode, str(report)], check=True, timeout=60)
    return report.read_text().count("<heap nr=")


def test_threads_share_the_limited_arenas(tmp_path: Path) -> None:
    assert _arenas(tmp_path, "free") > ARENAS
    assert _arenas(tmp_path, "limit") <= ARENAS
