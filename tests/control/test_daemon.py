"""The daemon: SIGTERM ends it with 0 even during a watch; a restart keeps the kubeconfig valid."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from types import FrameType

import yaml
from daemon_support import free_port, start_daemon

from diskferry.control.daemon import Daemon, DataDirError, ListenError

WATCH = "/apis/diskferry.io/v1alpha1/namespaces/default/virtualdisks?watch=true"


def _client(kubeconfig: dict) -> tuple[str, ssl.SSLContext, dict[str, str]]:
    cluster = kubeconfig["clusters"][0]["cluster"]
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    context = ssl.create_default_context(cadata=ca)
    headers = {"Authorization": f"Bearer {kubeconfig['users'][0]['user']['token']}"}
    return cluster["server"], context, headers


def _get(kubeconfig: dict, path: str) -> dict:
    server, context, headers = _client(kubeconfig)
    request = urllib.request.Request(server + path, headers=headers)
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        return json.load(answer)


def test_sigterm_during_a_watch_exits_0(tmp_path: Path) -> None:
    served = start_daemon(tmp_path / "data", tmp_path / "log")
    config = yaml.safe_load(served.kubeconfig.read_text())
    server, context, headers = _client(config)
    opened = threading.Event()

    def watch() -> None:
        request = urllib.request.Request(server + WATCH, headers=headers)
        with urllib.request.urlopen(request, context=context, timeout=60) as answer:
            opened.set()
            answer.read()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert opened.wait(30)
    assert served.stop() == 0
    watcher.join(30)
    assert not watcher.is_alive()
    assert served.token() not in served.log.read_text()


def test_restart_keeps_kubeconfig_valid(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    first = start_daemon(data, tmp_path / "log", port)
    before = yaml.safe_load(first.kubeconfig.read_text())
    assert first.kubeconfig.stat().st_mode & 0o777 == 0o600
    assert (data / "token").stat().st_mode & 0o777 == 0o600
    assert (data / "pki" / "ca.key").stat().st_mode & 0o777 == 0o600
    assert first.stop() == 0

    second = start_daemon(data, tmp_path / "log", port)
    try:
        after = yaml.safe_load(second.kubeconfig.read_text())
        assert after == before
        assert _get(before, "/api/v1/namespaces/default")["metadata"]["name"] == "default"
    finally:
        assert second.stop() == 0


def test_data_dir_not_writable_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    try:
        Daemon(blocker / "data")
    except DataDirError as error:
        assert "not writable" in error.message
    else:
        raise AssertionError("a data directory under a file was taken")
    src = Path(__file__).resolve().parents[2] / "src"
    done = subprocess.run(
        [sys.executable, "-m", "diskferry.cli.main", "serve", "--data-dir", str(blocker / "d")],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("diskferry: error: data directory")


class Recorder:
    """A background part that notes its start and stop, and the daemon it was made for."""

    def __init__(self, daemon: Daemon, seen: list[str]) -> None:
        self.daemon = daemon
        self.seen = seen

    def start(self) -> None:
        self.seen.append("start")

    def stop(self) -> None:
        self.seen.append("stop")


def test_background_parts_start_and_stop_with_the_daemon(tmp_path: Path) -> None:
    seen: list[str] = []
    made: list[Recorder] = []

    def factory(daemon: Daemon) -> Recorder:
        made.append(Recorder(daemon, seen))
        return made[-1]

    daemon = Daemon(tmp_path / "data", port=free_port(), background=[factory])
    runner = threading.Thread(target=daemon.run)
    runner.start()
    try:
        deadline = 300
        while not daemon.kubeconfig_path.exists() and deadline:
            deadline -= 1
            threading.Event().wait(0.1)
        assert seen == ["start"]
        assert made[0].daemon.service is daemon.service
    finally:
        daemon.stop()
        runner.join(30)
    assert not runner.is_alive()
    assert seen == ["start", "stop"]


def test_port_in_use_is_a_listen_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        daemon = Daemon(tmp_path / "data", port=taken.getsockname()[1])
        try:
            daemon.run()
        except ListenError as error:
            assert "cannot listen on 127.0.0.1:" in error.message
        else:
            raise AssertionError("a port in use was taken")


def test_in_the_main_thread_sigterm_stops_it_and_the_handlers_come_back(tmp_path: Path) -> None:
    # uvicorn has no switch to leave signals alone: run in the main thread, it would take
    # SIGTERM itself, then raise it again once stopped, into the handler it put back
    assert threading.current_thread() is threading.main_thread()
    taken: list[int] = []

    def mine(signum: int, frame: FrameType | None) -> None:
        taken.append(signum)

    daemon = Daemon(tmp_path / "data", port=free_port())

    def terminate() -> None:
        for _ in range(300):
            if daemon.kubeconfig_path.exists():
                break
            threading.Event().wait(0.1)
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.signal(signal.SIGTERM, mine)
    try:
        killer = threading.Thread(target=terminate)
        killer.start()
        daemon.run()
        killer.join(30)
        assert daemon.kubeconfig_path.exists()
        assert signal.getsignal(signal.SIGTERM) is mine
        assert taken == []
    finally:
        signal.signal(signal.SIGTERM, before)
