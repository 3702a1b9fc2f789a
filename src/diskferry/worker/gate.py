"""The gate a worker starts behind: `python -m diskferry.worker.gate MODULE ARG...` waits for
one byte on stdin, then runs `python -m MODULE ARG...` in this same process, its stdin at EOF.

The runner releases a worker only once it has recorded it, so a worker never runs unrecorded:
when stdin closes without the byte (its starter died first), the gate leaves NEVER_RAN in its
working directory, the job's, and ends at once, having done nothing.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys

RELEASE = b"\x01"
NEVER_RAN = "never-ran"


def _wait_for_release() -> bool:
    """Whether the runner released this worker (else its stdin closed first)."""
    return os.read(sys.stdin.fileno(), len(RELEASE)) == RELEASE


def _mark_never_ran() -> None:
    """Leave NEVER_RAN in the job's directory, unless it is gone already."""
    with contextlib.suppress(OSError):
        os.close(os.open(NEVER_RAN, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def main() -> None:
    """Run the module named by the first argument, with the others, once released."""
    if len(sys.argv) < 2:
        sys.exit("give the worker's module: python -m diskferry.worker.gate MODULE ARG...")
    if not _wait_for_release():
        _mark_never_ran()
        return
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, sys.stdin.fileno())
    os.close(null)
    module = sys.argv.pop(1)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
