"""A real qemu-ga, jailed where the only disk filesystem it can see (and freeze) is a loop image.

qemu-ga freezes every filesystem in its /proc/self/mountinfo whose source is a path: run
as is, it would freeze this host's root. So it runs in a private mount namespace that has
pivoted into a small ext4 image on a loop device, and starts only after the namespace's
mount table has been checked to hold no other path-sourced filesystem; the table is
checked again from outside, and the agent's own `guest-get-fsinfo`, before anyone freezes.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from diskferry.qemu.qmp import Qmp, QmpError

MiB = 1 << 20
LIFETIME = 120  # seconds an agent may live at most, whatever happens to the test
TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
GUEST_TOOLS = ("touch", "false", "sleep")
"""Programs the guest has besides the agent, for commands run in it (guest-exec)."""

# Runs in the new mount namespace: $1 the loop mount, $2 its device, then the program to run.
JAIL = r"""
set -eu
root=$1 device=$2
shift 2
mount -t proc proc "$root/proc"
cd "$root"
pivot_root . old
cd /
umount -l /old
found=no
while IFS= read -r line; do
    source=${line#* - }
    source=${source#* }
    source=${source%% *}
    case $source in
    "$device") found=yes ;;
    /*) echo "jail: $source is mounted too; qemu-ga not started" >&2; exit 3 ;;
    esac
done </proc/self/mountinfo
if [ "$found" != yes ]; then
    echo "jail: $device is not mounted; qemu-ga not started" >&2
    exit 3
fi
exec "$@"
"""


@dataclass
class GuestAgent:
    """A jailed qemu-ga: its socket, the guest's filesystem as the test sees it, and its device."""

    socket: str
    root: Path
    device: str
    pid: int

    def command(self, name: str) -> object:
        """Run one agent command on a connection of its own."""
        with Qmp(self.socket, timeout=10, guest_agent=True) as agent:
            return agent.command(name)


def _run(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PATH": TOOL_PATH},
    )


def _tool(name: str) -> str:
    found = shutil.which(name, path=TOOL_PATH)
    if found is None:
        pytest.fail(f"{name} is missing: run 'make setup'")
    return found


def _copy_with_libraries(program: str, root: Path) -> None:
    """Copy a program, the shared libraries it loads and the loader under root, at their paths."""
    proc = _run("ldd", program)
    assert proc.returncode == 0, proc.stderr
    files = {program, *re.findall(r"(/\S+) \(0x", proc.stdout)}
    for name in files:
        target = root / name.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(name, target)


def _sources(mountinfo: str) -> list[str]:
    """The mount sources of a mountinfo table (the field after ' - TYPE ')."""
    return [line.split(" - ", 1)[1].split()[1] for line in mountinfo.splitlines()]


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _wait_for_agent(proc: subprocess.Popen[bytes], socket: Path, log: Path) -> int:
    """Wait for the socket; return the agent's pid (the child of `timeout`)."""
    deadline = time.monotonic() + 15
    while not socket.exists():
        if proc.poll() is not None:
            text = log.read_text()
            skip_if_unshare_refused(text)
            pytest.fail(f"the jailed qemu-ga exited with {proc.returncode}: {text.strip()}")
        assert time.monotonic() < deadline, f"qemu-ga made no socket: {log.read_text()}"
        time.sleep(0.05)
    (pid,) = _children(proc.pid)
    return pid


def _check_jail(agent: GuestAgent) -> None:
    """Fail unless the agent sees exactly one disk filesystem, the loop image, mounted at /."""
    mountinfo = Path(f"/proc/{agent.pid}/mountinfo").read_text()
    paths = [s for s in _sources(mountinfo) if s.startswith("/")]
    assert paths == [agent.device], f"the agent's namespace mounts {paths}: not freezing"
    fsinfo = agent.command("guest-get-fsinfo")
    assert isinstance(fsinfo, list)
    number = os.stat(agent.device).st_rdev
    loop = f"{os.major(number)}:{os.minor(number)}"
    seen = [(fs["name"], fs["mountpoint"], fs["type"]) for fs in fsinfo]
    assert seen == [(loop, "/", "ext4")], f"the agent reports {seen}: not freezing"


@dataclass
class GuestRoot:
    """A loop-mounted ext4 image holding qemu-ga and what it loads: the guest's only disk."""

    path: Path
    device: str
    qemu_ga: str

    def jail(self, *program: str) -> list[str]:
        """The command that runs `program` jailed in this root, for LIFETIME seconds at most."""
        namespace = ["unshare", "--mount", "--propagation", "private"]
        script = ["sh", "-c", JAIL, "jail", str(self.path), self.device]
        return ["timeout", str(LIFETIME), *namespace, *script, *program]

    def run(self, *program: str) -> subprocess.CompletedProcess[str]:
        """Run `program` jailed in this root, to its end."""
        return _run(*self.jail(*program))


def skip_if_unshare_refused(output: str) -> None:
    """Skip the test when the kernel refused the private mount namespace."""
    if "unshare failed" in output:
        pytest.skip(f"the kernel refuses a private mount namespace: {output.strip()}")


@contextlib.contextmanager
def guest_root(tmp_path: Path) -> Iterator[GuestRoot]:
    """Make, mount and fill the guest's image at tmp_path/root; thaw, unmount and detach after."""
    qemu_ga = _tool("qemu-ga")
    umount = _tool("umount")
    image, root = tmp_path / "guest.img", tmp_path / "root"
    with open(image, "wb") as f:
        f.truncate(64 * MiB)
    made = _run("mkfs.ext4", "-q", "-F", str(image))
    assert made.returncode == 0, made.stderr
    attached = _run("losetup", "--find", "--show", str(image))
    if attached.returncode != 0:
        pytest.skip(f"the kernel refuses loop devices: {attached.stderr.strip()}")
    device = attached.stdout.strip()
    root.mkdir()
    try:
        mounted = _run("mount", "-t", "ext4", device, str(root))
        assert mounted.returncode == 0, mounted.stderr
        for name in ("proc", "run", "old", "dev"):
            (root / name).mkdir()
        os.mknod(root / "dev/null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        for program in (qemu_ga, umount, *(_tool(name) for name in GUEST_TOOLS)):
            _copy_with_libraries(program, root)
        yield GuestRoot(root, device, qemu_ga)
    finally:
        if os.path.ismount(root):
            _run("fsfreeze", "--unfreeze", str(root), timeout=10)
            if _run("umount", str(root)).returncode != 0:
                _run("umount", "--lazy", str(root))
        _run("losetup", "--detach", device)


@contextlib.contextmanager
def jailed_agent(tmp_path: Path, *, blocked: tuple[str, ...] = ()) -> Iterator[GuestAgent]:
    """Start qemu-ga in its jail (refusing the commands in `blocked`); thaw and stop it after."""
    with guest_root(tmp_path) as root:
        argv = [root.qemu_ga, "-m", "unix-listen", "-p", "/run/qga.sock", "-t", "/run"]
        argv += ["-f", "/run/qga.pid"]
        if blocked:
            argv += ["-b", ",".join(blocked)]
        log = tmp_path / "qga.log"
        proc: subprocess.Popen[bytes] | None = None
        agent: GuestAgent | None = None
        try:
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    root.jail(*argv), stdout=out, stderr=out, env={"PATH": TOOL_PATH}
                )
            socket = root.path / "run/qga.sock"
            pid = _wait_for_agent(proc, socket, log)
            agent = GuestAgent(str(socket), root.path, root.device, pid)
            _check_jail(agent)
            yield agent
        finally:
            if agent is not None:
                with contextlib.suppress(QmpError):
                    agent.command("guest-fsfreeze-thaw")
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
