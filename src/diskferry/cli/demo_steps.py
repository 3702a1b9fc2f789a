"""How the demo talks to its daemon as a user would: each command one step that fails or hangs
as a DemoError, manifests applied from files, and `get -w` shown while `wait` waits.

While a watch runs, two commands print at once: the demo reads both and writes their lines
itself, one whole line at a time, so that no line of one lands inside a line of the other.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from diskferry.base import DiskferryError

DISKFERRY = [sys.executable, "-m", "diskferry.cli.main"]
# the longest one command of the demo may take before it counts as hung
STEP_SECONDS = 300
_OUTPUT = threading.Lock()


class DemoError(DiskferryError):
    """A demo step did not do what it should."""

    reason = "DemoFailed"


def step(argv: list[str], what: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    """Run one command of the demo; one that fails or hangs is a DemoError naming `what`."""
    try:
        proc = subprocess.run(argv, timeout=STEP_SECONDS, check=False, **kwargs)
    except subprocess.TimeoutExpired as e:
        raise DemoError(f"{what} did not finish within {STEP_SECONDS} s") from e
    if proc.returncode != 0:
        raise DemoError(f"{what} failed")
    return proc


def diskferry(kubeconfig: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    """Run `diskferry ARGS` at the demo's daemon."""
    argv = [*DISKFERRY, *args, "--kubeconfig", str(kubeconfig)]
    return step(argv, f"diskferry {' '.join(args[:3])}", **kwargs)


def apply(kubeconfig: Path, path: Path, manifests: str) -> None:
    """Write `manifests` to `path` and `diskferry apply -f` it."""
    path.write_text(manifests)
    diskferry(kubeconfig, "apply", "-f", str(path))


def get_object(kubeconfig: Path, kind: str, name: str, namespace: str | None = None) -> dict:
    """The object as `diskferry get KIND NAME -o json` prints it."""
    where = ["-n", namespace] if namespace else []
    proc = diskferry(kubeconfig, "get", kind, name, "-o", "json", *where, stdout=subprocess.PIPE)
    return json.loads(proc.stdout)


def _show(lines: Iterable[bytes]) -> None:
    """Write each line to stdout whole."""
    for line in lines:
        with _OUTPUT:
            sys.stdout.buffer.write(line if line.endswith(b"\n") else line + b"\n")
            sys.stdout.buffer.flush()


def watched(
    kubeconfig: Path,
    kind: str,
    waits: Iterable[tuple[str, str, str, str | None]],
    all_namespaces: bool = False,
) -> None:
    """Show `diskferry get KIND -w` while `diskferry wait` waits for each (kind, name, phase,
    namespace); the watch is stopped once all are there."""
    where = ["--kubeconfig", str(kubeconfig), *(["-A"] if all_namespaces else [])]
    sys.stdout.flush()
    # its stderr, where it says it was stopped, left out
    watch = subprocess.Popen(
        [*DISKFERRY, "get", kind, "-w", *where],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert watch.stdout is not None
    shown = threading.Thread(target=_show, args=(watch.stdout,), daemon=True)
    shown.start()
    try:
        for wait_kind, name, phase, namespace in waits:
            ns = ["-n", namespace] if namespace else []
            args = ("wait", wait_kind, name, f"--for=phase={phase}", "--timeout=5m", *ns)
            said = diskferry(kubeconfig, *args, stdout=subprocess.PIPE).stdout
            if b"condition met" not in said:
                raise DemoError(f"diskferry wait {wait_kind} {name} did not say its condition met")
            _show(said.splitlines(keepends=True))
    finally:
        watch.terminate()
        watch.wait()
        shown.join()
