"""Backup sessions freeze the guest's filesystems through a real qemu-ga, jailed on a loop image."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from guest_agent import GuestAgent, guest_root, jailed_agent, skip_if_unshare_refused
from qemu_helpers import KiB, MiB, Vm, read, write

from diskferry.qemu.qmp import Qmp, QmpError
from diskferry.qemu.session import FLEECE_NODE, BackupSession, SessionDisk

REPO = "repo1"


def test_the_jail_starts_nothing_beside_another_disk_filesystem(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    with guest_root(tmp_path) as root, guest_root(tmp_path / "other") as other:
        alone = root.run(root.qemu_ga, "--version")
        skip_if_unshare_refused(alone.stderr)
        assert (alone.returncode, alone.stderr) == (0, ""), alone.stderr
        assert alone.stdout.startswith("QEMU Guest Agent")
        mountpoint = root.path / "other"
        mountpoint.mkdir()
        subprocess.run(["mount", "--bind", other.path, mountpoint], check=True, timeout=30)
        try:
            beside = root.run(root.qemu_ga, "--version")
        finally:
            subprocess.run(["umount", mountpoint], check=True, timeout=30)
    assert beside.returncode == 3
    assert beside.stdout == ""
    assert beside.stderr == f"jail: {other.device} is mounted too; qemu-ga not started\n"


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[GuestAgent]:
    """A running qemu-ga whose only filesystem is a 64 MiB ext4 loop image."""
    with jailed_agent(tmp_path) as started:
        yield started


def _session(vm: Vm, agent: GuestAgent) -> BackupSession:
    return BackupSession(
        [SessionDisk("vda", vm.disk.volume)],
        REPO,
        qmp_socket=vm.qmp_socket,
        nbd_socket=vm.nbd_socket,
        qga_socket=agent.socket,
    )


def _left_behind(vm: Vm) -> list[str]:
    """Bitmaps, nodes, jobs and exports the sessions made on the VM, and its fleecing files."""
    with Qmp(vm.qmp_socket) as qmp:
        found = [e["id"] for e in qmp.command("query-block-exports") if e["id"] != "vm"]
        found += [j["device"] for j in qmp.command("query-block-jobs")]
        for node in qmp.command("query-named-block-nodes", flat=True):
            if node["node-name"].startswith("diskferry-"):
                found.append(node["node-name"])
            found += [b["name"] for b in node.get("dirty-bitmaps", []) if REPO in b.get("name", "")]
    files = os.listdir(os.path.dirname(vm.disk.volume))
    return found + [f for f in files if f.endswith(".fleece.qcow2")]


class _Watch:
    """Records the agent commands a session sends, and what holds while its transaction runs."""

    def __init__(
        self,
        agent: GuestAgent,
        monkeypatch: pytest.MonkeyPatch,
        before_transaction: Callable[[Callable[..., Any]], object] | None = None,
    ) -> None:
        self.agent = agent
        self.before_transaction = before_transaction
        self.calls: list[str] = []
        self.status_in_transaction: object = None
        self.write_blocked_in_transaction: bool | None = None
        self.writer: threading.Thread | None = None
        self._connection: Qmp | None = None
        self._command = Qmp.command
        monkeypatch.setattr(Qmp, "command", self._wrap())

    def _wrap(self) -> Any:
        watch = self

        def command(qmp: Qmp, name: str, arguments: Any = None, /, **args: Any) -> Any:
            if qmp.socket_path == watch.agent.socket:
                watch.calls.append(name)
                watch._connection = qmp
            elif name == "transaction":
                watch.calls.append(name)
                return watch._transaction(qmp, arguments, args)
            return watch._command(qmp, name, arguments, **args)

        return command

    def _transaction(self, qmp: Qmp, arguments: Any, args: dict[str, Any]) -> Any:
        """Ask the agent how it stands, and start a write into the guest, then run it."""
        assert self._connection is not None, "the transaction ran without the guest agent"
        self.status_in_transaction = self._command(self._connection, "guest-fsfreeze-status")
        target = self.agent.root / "written-while-frozen"
        self.writer = threading.Thread(target=target.write_bytes, args=(b"x",), daemon=True)
        self.writer.start()
        if self.before_transaction is not None:
            self.before_transaction(functools.partial(self._command, qmp))
        try:
            return self._command(qmp, "transaction", arguments, **args)
        finally:
            # On a frozen filesystem the write waits for the thaw, however long this waits.
            self.writer.join(1.0)
            self.write_blocked_in_transaction = self.writer.is_alive()

    def assert_frozen_then_thawed(self) -> None:
        """The guest was frozen during the transaction only, and its waiting write went through."""
        assert self.write_blocked_in_transaction is True
        assert self.status_in_transaction == "frozen"
        assert self.calls == ["guest-fsfreeze-freeze", "transaction", "guest-fsfreeze-thaw"]
        assert self.writer is not None
        self.writer.join(10)
        assert not self.writer.is_alive(), "the guest's write still waits: not thawed"
        assert (self.agent.root / "written-while-frozen").read_bytes() == b"x"
        assert self.agent.command("guest-fsfreeze-status") == "thawed"


def test_a_session_freezes_the_guest_around_its_transaction(
    vm: Vm, agent: GuestAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(vm.url, 1 * MiB, 64 * KiB, 0x5A)
    watch = _Watch(agent, monkeypatch)
    session = _session(vm, agent)
    assert session.consistency == "filesystems frozen"
    with session as opened:
        (export,) = opened.start({})
        watch.assert_frozen_then_thawed()
        assert export.mode == "full"
        assert read(export.url, 1 * MiB, 64 * KiB) == b"\x5a" * (64 * KiB)
    assert _left_behind(vm) == [export.checkpoint]


def test_a_failed_transaction_thaws_the_guest_and_leaves_nothing(
    vm: Vm, agent: GuestAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    def remove_fleecing_node(monitor: Callable[..., Any]) -> object:
        return monitor("blockdev-del", node_name=f"{FLEECE_NODE}0")

    watch = _Watch(agent, monkeypatch, before_transaction=remove_fleecing_node)
    with pytest.raises(QmpError, match=r"^QEMU refused transaction"), _session(vm, agent) as s:
        s.start({})
    watch.assert_frozen_then_thawed()
    assert _left_behind(vm) == []


def test_a_refused_freeze_fails_the_session_before_any_checkpoint(vm: Vm, tmp_path: Path) -> None:
    refused = r"^the guest agent refused guest-fsfreeze-freeze: .*disabled"
    with jailed_agent(tmp_path, blocked=("guest-fsfreeze-freeze",)) as agent:
        with pytest.raises(QmpError, match=refused), _session(vm, agent) as session:
            session.start({})
        assert agent.command("guest-fsfreeze-status") == "thawed"
    assert _left_behind(vm) == []


def test_the_cli_reports_a_frozen_backup(
    vm: Vm, agent: GuestAgent, diskferry: Any, tmp_path: Path
) -> None:
    diskferry.env.update(
        DISKFERRY_PASSWORD="guest agent test", DISKFERRY_CACHE_DIR=str(tmp_path / "cache")
    )
    repo = str(tmp_path / "repo")
    made = diskferry("repo", "init", "--repo", repo, "--json")
    assert made.code == 0, made.stderr
    running = ["--qmp", vm.qmp_socket, "--nbd-socket", vm.nbd_socket, "--qga", agent.socket]
    disk = ["--vm", "web", "--disk", f"vda={vm.disk.volume}"]
    done = diskferry("backup", "--repo", repo, *disk, *running, "--no-progress", "--json")
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["consistency"] == "filesystems frozen"
    assert "crash-consistent" not in done.stderr
    assert agent.command("guest-fsfreeze-status") == "thawed"
