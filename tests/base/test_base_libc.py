"""The C library is found without `ldconfig`: no module of the byte or base layer asks ctypes to
search for it, which would run `ldconfig -p` at every start-up."""

from __future__ import annotations

import subprocess
import sys

_CHILD = """
import ctypes.util

def refuse(name):
    raise AssertionError(f"searched for the library {name}")

ctypes.util.find_library = refuse
import diskferry.disk.file_volume, diskferry.base.heap, diskferry.disk.write_behind
import diskferry.objstore.local
from diskferry.base.heap import limit_arenas
assert limit_arenas()
"""


def test_the_byte_layer_loads_without_searching_for_the_c_library() -> None:
    child = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
