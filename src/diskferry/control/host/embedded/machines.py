"""The embedded host's machines (`host.machines`): a QEMU process per VM, found again by files
after a restart, and one monitor connection of the controller's own to each.

Each VM lives in DATA_DIR/vms/<ns>/<name>/: `qmp.sock` (the QMP monitor others use: a backup
of the running VM, a user), `control.sock` (a second monitor only the controller uses, so
a long session on `qmp.sock` never blocks it), `agent.sock` (the guest agent, when asked),
`qemu.log` (the command QEMU was started with, as libvirt logs it, then QEMU's stdout and
stderr, each line stamped), `serial.log` and `state.json` (pid, start time, boot id,
and what the VM was launched with); every folder down to it is 0700. QEMU runs in a session
of its own, as engine workers do (see `runner.local`): a daemon that stops or is killed leaves
its VMs running, as a hypervisor's management daemon does, and the next one re-attaches to
them by pid and start time; only deleting the VM, or its run policy, stops one. Each QEMU runs in
a cgroup of its own weighted by its cores and core fraction (`cpushare`). Its guest agent is
asked what it knows at most every AGENT_SECONDS, the answer kept for the questions between.

A VM that runs elsewhere names its QMP socket in `spec.qmpSocket`; the daemon (root) speaks to
it only when it lies in DATA_DIR/vm-sockets (or a folder below, none of them a symlink) and is
a socket, not a symlink, owned by root or the daemon's user: a client cannot make the daemon
connect to any other socket of the host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from diskferry.base import procstat
from diskferry.control.host.embedded import cpushare
from diskferry.control.host.embedded.guest import ask
from diskferry.control.host.embedded.qemu_config import Paths, qemu_config
from diskferry.control.host.embedded.seeds import write_seed
from diskferry.control.host.machines import (
    AGENT_SECONDS,
    Device,
    External,
    GuestFacts,
    Launched,
    MachineError,
    MachineSpec,
    RunState,
    SocketRefusedError,
    Sockets,
)
from diskferry.control.resources.virtualmachine import VirtualMachine
from diskferry.control.runtime.runner.local import write_atomically
from diskferry.control.runtime.runner.tail import tail_lines
from diskferry.qemu import cbt
from diskferry.qemu.qmp import Qmp, QmpError
from diskferry.qemu.system import command
from diskferry.registry.layout import private_folder

SOCKET_PATH_MAX = 107
SOCKETS_DIR = "vm-sockets"
STOP_SECONDS = 10.0
MONITOR_TIMEOUT = 5.0
STARTING = " starting: "
SEED = "provisioning.iso"
WATCH_SECONDS = 2.0


def _group(namespace: str, name: str) -> str:
    """The name of the VM's cgroup."""
    return f"{namespace}.{name}"


def _stamp() -> str:
    """Now, as QEMU stamps its own log lines (`-msg timestamp=on`)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class QemuMachines:
    """Starts, finds and stops VMs' QEMU processes under DATA_DIR/vms."""

    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "vms"
        self.sockets_dir = Path(os.path.abspath(data_dir)) / SOCKETS_DIR
        self._lock = threading.Lock()
        self._children: dict[Path, subprocess.Popen[bytes]] = {}
        self._asked: dict[tuple[str, str], tuple[float, GuestFacts]] = {}

    def directory(self, namespace: str, name: str) -> Path:
        """Where the VM's sockets, logs and state live."""
        return self.root / namespace / name

    def qmp_socket(self, namespace: str, name: str) -> Path:
        """The QMP socket of a VM diskferry runs, for others (backups, users) to use."""
        return self.directory(namespace, name) / "qmp.sock"

    def control_socket(self, namespace: str, name: str) -> Path:
        """The QMP socket only the controller uses."""
        return self.directory(namespace, name) / "control.sock"

    def agent_socket(self, namespace: str, name: str) -> Path:
        """The guest agent's socket of a VM diskferry runs."""
        return self.directory(namespace, name) / "agent.sock"

    def serial_log(self, namespace: str, name: str) -> Path:
        """Where the VM's serial console is written."""
        return self.directory(namespace, name) / "serial.log"

    def external_socket(self, path: str) -> str:
        """`path`, a VM's `spec.qmpSocket`, when it is a socket the daemon may speak QMP to: in
        DATA_DIR/vm-sockets, through no symlink, owned by root or the daemon's user;
        SocketRefusedError saying why otherwise, MachineError while it does not exist."""
        socket = Path(path)
        if os.path.normpath(path) != path or not socket.is_relative_to(self.sockets_dir):
            raise SocketRefusedError(
                f"the QMP socket {path} is not in {self.sockets_dir}, where the sockets of VMs "
                "that run elsewhere must be"
            )
        below = socket.relative_to(self.sockets_dir).parts
        parts = [self.sockets_dir.joinpath(*below[:n]) for n in range(len(below) + 1)]
        for part in parts:
            try:
                found = os.lstat(part)
            except FileNotFoundError:
                raise MachineError(f"the QMP socket {path} does not exist") from None
            wanted, what = (
                (stat.S_ISSOCK, "a socket") if part == socket else (stat.S_ISDIR, "a folder")
            )
            if not wanted(found.st_mode):
                raise SocketRefusedError(f"{part} is not {what} (a symlink is never followed)")
            if found.st_uid not in (0, os.geteuid()):
                raise SocketRefusedError(
                    f"{part} is owned by uid {found.st_uid}, not by root or the daemon's user"
                )
        return path

    def check_paths(self, namespace: str, name: str) -> None:
        """Refuse a VM whose socket paths are longer than a Unix socket address holds."""
        for path in (self.qmp_socket(namespace, name), self.control_socket(namespace, name)):
            if len(os.fsencode(path)) > SOCKET_PATH_MAX:
                raise MachineError(
                    f"the socket path {path} is longer than {SOCKET_PATH_MAX} bytes: "
                    "use a shorter data directory, namespace or name"
                )

    def _record(self, directory: Path) -> dict[str, Any]:
        try:
            data = json.loads((directory / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def start(
        self, namespace: str, name: str, spec: MachineSpec, launch: dict[str, Any]
    ) -> Launched:
        """Start the VM's QEMU as `spec` says, unless it runs already, its first-boot seed
        written into its folder; `launch` is kept with it, and its cores and core fraction
        weigh its CPU."""
        self.check_paths(namespace, name)
        directory = self.directory(namespace, name)
        paths = Paths(
            monitors=[self.control_socket(namespace, name), self.qmp_socket(namespace, name)],
            agent=self.agent_socket(namespace, name),
            serial_log=self.serial_log(namespace, name),
            seed=directory / SEED,
        )

        def variables(template: Path, secure: bool) -> Path:
            return self.efi_variables(namespace, name, template, secure)

        config, launched = qemu_config(f"{namespace}.{name}", spec, paths, variables)
        if spec.seed is not None:
            write_seed(paths.seed, spec.seed.label, spec.seed.files)
        share = (spec.cores, spec.core_fraction)
        unweighed = self._run(namespace, name, command(config), launch, share)
        return dataclasses.replace(launched, unweighed=unweighed)

    def _run(
        self,
        namespace: str,
        name: str,
        argv: list[str],
        launch: dict[str, Any],
        share: tuple[int, int],
    ) -> str | None:
        """Run `argv` as the VM's QEMU, unless it runs already; `launch` is kept with it, and
        `share` (cores, percent of each) weighs its CPU; why it could not be weighed."""
        directory = self.directory(namespace, name)
        with self._lock:
            if self._alive(directory):
                return self.unweighed(namespace, name)
            private_folder(directory)
            for stale in ("qmp.sock", "control.sock", "agent.sock"):
                (directory / stale).unlink(missing_ok=True)
            log = os.open(directory / "qemu.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(log, f"{_stamp()}{STARTING}{shlex.join(argv)}\n".encode())
                child = subprocess.Popen(
                    argv,
                    cwd=directory,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            except OSError as e:
                raise MachineError(f"cannot start {argv[0]}: {e.strerror or e}") from e
            finally:
                os.close(log)
            self._children[directory] = child
            unweighed = cpushare.place(child.pid, _group(namespace, name), *share)
            stat = procstat.read(child.pid)
            record = {
                "unweighed": unweighed,
                "pid": child.pid,
                "startTime": stat.start_time if stat else None,
                "bootId": procstat.boot_id(),
                "startedAt": time.time(),
                "argv": argv,
                "launch": launch,
            }
            write_atomically(directory / "state.json", json.dumps(record).encode())
            return unweighed

    def _alive(self, directory: Path) -> bool:
        child = self._children.get(directory)
        if child is not None:
            if child.poll() is None:
                return True
            del self._children[directory]
            return False
        record = self._record(directory)
        pid, started = record.get("pid"), record.get("startTime")
        if record.get("bootId") != procstat.boot_id():
            return False
        return isinstance(pid, int) and isinstance(started, int) and procstat.is_same(pid, started)

    def running(self, namespace: str, name: str) -> bool:
        """Whether the VM's QEMU process runs."""
        with self._lock:
            return self._alive(self.directory(namespace, name))

    def unweighed(self, namespace: str, name: str) -> str | None:
        """Why the VM's QEMU could not be weighed in a cgroup of its own, None when it was."""
        return self._record(self.directory(namespace, name)).get("unweighed")

    def launch(self, namespace: str, name: str) -> dict[str, Any]:
        """What the VM's QEMU was last launched with ({} when never)."""
        return self._record(self.directory(namespace, name)).get("launch") or {}

    def efi_variables(self, namespace: str, name: str, template: Path, secure: bool) -> Path:
        """The VM's own UEFI variables (kept in its folder across starts, one file with Secure
        Boot and one without), copied from OVMF's `template` the first time."""
        directory = self.directory(namespace, name)
        path = directory / ("efivars-secureboot.fd" if secure else "efivars.fd")
        if path.exists():
            return path
        try:
            data = template.read_bytes()
        except OSError as e:
            raise MachineError(
                f"OVMF's {template.name} cannot be read ({e.strerror}): UEFI needs Debian's "
                "ovmf package"
            ) from e
        private_folder(directory)
        write_atomically(path, data)
        return path

    def state(self, namespace: str, name: str) -> RunState | None:
        """The running VM's state and QEMU's version, asked on the controller's monitor; None
        before QEMU opened its monitors, or when it does not answer."""
        if not self.control_socket(namespace, name).exists():
            return None
        try:
            with self.monitor(namespace, name) as qmp:
                status = qmp.command("query-status")["status"]
                version = qmp.command("query-version")["qemu"]
        except QmpError:
            return None
        return RunState(status, f"{version['major']}.{version['minor']}.{version['micro']}")

    def power_down(self, namespace: str, name: str) -> None:
        """Press the VM's ACPI power button (QMP `system_powerdown`), and remember when;
        MachineError while its monitors are not open."""
        directory = self.directory(namespace, name)
        try:
            with self.monitor(namespace, name) as qmp:
                qmp.command("system_powerdown")
        except QmpError as e:
            raise MachineError(f"the power button of {namespace}/{name}: {e.message}") from e
        with self._lock:
            record = {**self._record(directory), "powerDownAt": time.time()}
            write_atomically(directory / "state.json", json.dumps(record).encode())

    def since_power_down(self, namespace: str, name: str) -> float | None:
        """Seconds since the running VM's power button was pressed, None when it was not."""
        pressed = self._record(self.directory(namespace, name)).get("powerDownAt")
        return time.time() - pressed if isinstance(pressed, float) else None

    def since_start(self, namespace: str, name: str) -> float | None:
        """Seconds since the VM's QEMU was last started, None when it never was."""
        started = self._record(self.directory(namespace, name)).get("startedAt")
        return time.time() - started if isinstance(started, float) else None

    def monitor(self, namespace: str, name: str) -> Qmp:
        """A connection to the controller's own QMP monitor of the VM."""
        return Qmp(str(self.control_socket(namespace, name)), timeout=MONITOR_TIMEOUT)

    def log_tail(self, namespace: str, name: str, lines: int = 20) -> list[str]:
        """The last lines of the VM's log: the command QEMU was started with, then what QEMU
        wrote to its stdout and stderr."""
        return tail_lines(self.directory(namespace, name) / "qemu.log", lines)

    def last_words(self, namespace: str, name: str, lines: int) -> list[str]:
        """The last lines QEMU itself wrote (its command line left out)."""
        tail = self.log_tail(namespace, name, lines + 1)
        return [line for line in tail if STARTING not in line][-lines:]

    def _wait_gone(self, namespace: str, name: str, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.running(namespace, name):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self, namespace: str, name: str) -> None:
        """End the VM's QEMU: SIGTERM, on which QEMU quits cleanly and stores its persistent
        bitmaps, then SIGKILL if it has not ended in time."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pid = self._record(self.directory(namespace, name)).get("pid")
            if isinstance(pid, int) and self.running(namespace, name):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            if self._wait_gone(namespace, name, STOP_SECONDS):
                cpushare.remove(_group(namespace, name))
                return
        raise MachineError(f"the QEMU of {namespace}/{name} would not end")

    def remove(self, namespace: str, name: str) -> None:
        """Remove a stopped VM's directory (sockets, logs, state) and what its agent said."""
        self._asked.pop((namespace, name), None)
        directory = self.directory(namespace, name)
        shutil.rmtree(directory, ignore_errors=True)
        with contextlib.suppress(OSError):
            directory.parent.rmdir()

    def sockets(self, vm: VirtualMachine) -> Sockets:
        """The VM's sockets as the daemon decided them: its own for a VM it runs, the checked
        `spec.qmpSocket` (and no agent) for one that runs elsewhere (SocketRefusedError when
        that is not one the daemon may use); never what the VM's status says."""
        if vm.spec.qmp_socket:
            return Sockets(self.external_socket(vm.spec.qmp_socket), None)
        namespace, name = vm.metadata.namespace or "", vm.metadata.name or ""
        agent = self.agent_socket(namespace, name) if vm.spec.enable_guest_agent else None
        return Sockets(str(self.qmp_socket(namespace, name)), None if agent is None else str(agent))

    def guest(self, vm: VirtualMachine) -> GuestFacts:
        """What the VM's guest agent says, asked at most every AGENT_SECONDS (not answered
        without an agent channel)."""
        key = (vm.metadata.namespace or "", vm.metadata.name or "")
        agent = None if vm.spec.qmp_socket else self.sockets(vm).agent
        asked = self._asked.get(key)
        if asked is None or time.monotonic() - asked[0] > AGENT_SECONDS:
            asked = (time.monotonic(), ask(agent))
            self._asked[key] = asked
        return asked[1]

    def external(self, vm: VirtualMachine, files: list[str]) -> External:
        """The run state of the VM whose QEMU is at `spec.qmpSocket`, and the node of each of
        `files` it opened (the file, or its CBT overlay); MachineError when it cannot be
        reached, SocketRefusedError when the socket is not one the daemon may use."""
        socket = self.sockets(vm).qmp
        try:
            with Qmp(socket, timeout=WATCH_SECONDS) as qmp:
                status = qmp.command("query-status")["status"]
                nodes = qmp.command("query-named-block-nodes", flat=True)
        except QmpError as e:
            raise MachineError(e.message) from e
        devices = {}
        for file in files:
            names = {file, cbt.overlay_path(file)}
            node = next((n for n in nodes if n.get("file") in names), None)
            if node is not None:
                devices[file] = Device(node["node-name"], node.get("drv") == "qcow2")
        return External(status, devices)
