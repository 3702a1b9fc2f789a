"""`diskferry apply|get|describe|delete|logs|wait` against a real `diskferry serve` on a free
port and a temporary data directory; status changes made with kubectl, as a controller would."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

EXE = Path(sys.executable).with_name("diskferry")
SECRET_AND_DISK = """\
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {password: hunter2-very-secret}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {name: vd1, labels: {tier: gold}}
spec:
  persistentVolumeClaim: {size: 64Mi}
"""

SERVE = (str(EXE), "serve", "--no-controllers")


def disk(name: str, namespace: str | None = None) -> str:
    """A blank VirtualDisk manifest, in `namespace` or in the one the command gives."""
    where = f", namespace: {namespace}" if namespace else ""
    return (
        "apiVersion: diskferry.io/v1alpha1\nkind: VirtualDisk\n"
        f"metadata: {{name: {name}{where}}}\n"
        "spec:\n  persistentVolumeClaim: {size: 64Mi}\n"
    )


@dataclass
class Served:
    """A running `diskferry serve`, and everything the CLI printed (to look for the token in)."""

    data_dir: Path
    env: dict[str, str]
    printed: list[str]

    @property
    def token(self) -> str:
        """The daemon's bearer token."""
        return (self.data_dir / "token").read_text().strip()


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    """`diskferry serve` on a free port and a temporary data directory, once it answers;
    when it stops, the token must not be in anything it or the CLI printed."""
    tmp = tmp_path_factory.mktemp("daemon")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["TMPDIR"] = str(tmp)
    running = Served(tmp / "data", env, [])
    log_path = tmp / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [*SERVE, "--data-dir", str(running.data_dir), "--port", "0"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + 60
        while not (running.data_dir / "kubeconfig").exists():
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.2)
        yield running
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    for text in [*running.printed, log_path.read_text()]:
        assert running.token not in text


@dataclass
class Daemon:
    """The CLI pointed at the daemon's data directory, in a namespace of the test's own."""

    served: Served
    namespace: str
    tmp: Path
    cli: Any

    def __call__(self, *args: str | os.PathLike[str]) -> Any:
        """Run `diskferry ARGS --data-dir DATA_DIR -n NAMESPACE`; its Result."""
        result = self.cli(*args, *self.options(given=args))
        self.served.printed += [result.stdout, result.stderr]
        return result

    def options(self, given: tuple = ()) -> list[str]:
        """The options that point a command at the daemon and at the test's namespace, unless
        the command names one itself."""
        if "-n" in given:
            return ["--data-dir", str(self.served.data_dir)]
        return ["--data-dir", str(self.served.data_dir), "-n", self.namespace]

    def start(self, *args: str) -> subprocess.Popen:
        """Start `diskferry ARGS` at the daemon, its output in pipes."""
        return subprocess.Popen(
            [str(EXE), *args, *self.options()],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.served.env,
        )

    def manifest(self, name: str, text: str) -> Path:
        """A manifest file in the test's directory."""
        path = self.tmp / name
        path.write_text(text)
        return path

    @property
    def kubeconfig(self) -> Path:
        """The kubeconfig the daemon wrote."""
        return self.served.data_dir / "kubeconfig"

    def kubectl(self, *args: str) -> str:
        """Run kubectl against the daemon in the test's namespace; its stdout."""
        done = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), "-n", self.namespace, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def set_status(self, kind: str, name: str, status: dict) -> None:
        """Write the object's status as a controller does, through the status subresource."""
        patch = json.dumps({"status": status})
        self.kubectl("patch", kind, name, "--subresource=status", "--type=merge", "-p", patch)

    @property
    def token(self) -> str:
        """The daemon's bearer token."""
        return self.served.token


def namespace(name: str) -> str:
    """A Namespace manifest."""
    return f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n"


@pytest.fixture
def daemon(served, tmp_path, request, diskferry) -> Daemon:
    """The CLI at the daemon, in a fresh namespace named after the test."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_"))[:40]
    diskferry.env.pop("KUBECONFIG", None)
    running = Daemon(served, name.strip("-"), tmp_path, diskferry)
    made = running("apply", "-f", running.manifest("ns.yaml", namespace(running.namespace)))
    assert made.code == 0, made.stderr
    return running


def test_apply_creates_then_leaves_unchanged_then_configures(daemon) -> None:
    path = daemon.manifest("set.yaml", SECRET_AND_DISK)
    first = daemon("apply", "-f", path)
    assert first.code == 0, first.stderr
    assert first.stdout == "secret/creds created\nvirtualdisk.diskferry.io/vd1 created\n"
    again = daemon("apply", "-f", path)
    assert again.stdout == "secret/creds unchanged\nvirtualdisk.diskferry.io/vd1 unchanged\n"
    daemon.manifest("set.yaml", SECRET_AND_DISK.replace("gold", "silver"))
    changed = daemon("apply", "-f", path)
    assert changed.stdout == "secret/creds unchanged\nvirtualdisk.diskferry.io/vd1 configured\n"
    labels = json.loads(daemon("get", "vd", "vd1", "-o", "json").stdout)["metadata"]["labels"]
    assert labels == {"tier": "silver"}


def test_apply_reads_a_directory_and_stdin(daemon) -> None:
    folder = daemon.tmp / "manifests"
    folder.mkdir()
    (folder / "a.yaml").write_text(disk("vd-a"))
    (folder / "b.yml").write_text(disk("vd-b"))
    (folder / "notes.txt").write_text("not a manifest")
    from_dir = daemon("apply", "-f", folder)
    assert from_dir.stdout.splitlines() == [
        "virtualdisk.diskferry.io/vd-a created",
        "virtualdisk.diskferry.io/vd-b created",
    ]
    from_stdin = subprocess.run(
        [str(EXE), "apply", "-f", "-", *daemon.options()],
        input=disk("vd-c"),
        capture_output=True,
        text=True,
        env=daemon.served.env,
        check=False,
    )
    assert from_stdin.stdout == "virtualdisk.diskferry.io/vd-c created\n", from_stdin.stderr


def test_get_in_each_output_form(daemon) -> None:
    daemon("apply", "-f", daemon.manifest("set.yaml", SECRET_AND_DISK))
    table = daemon("get", "virtualdisks").stdout.splitlines()
    assert table[0].split()[:2] == ["NAME", "PHASE"]
    assert "PROGRESS" not in table[0]
    assert table[1].split()[0] == "vd1"
    wide = daemon("get", "vd", "-o", "wide").stdout.splitlines()
    assert "PROGRESS" in wide[0].split() and "STORAGECLASS" in wide[0].split()
    one = yaml.safe_load(daemon("get", "virtualdisk", "vd1", "-o", "yaml").stdout)
    assert one["kind"] == "VirtualDisk" and one["spec"]["persistentVolumeClaim"]["size"] == "64Mi"
    listed = json.loads(daemon("get", "vd", "-o", "json").stdout)
    assert listed["kind"] == "List" and [o["metadata"]["name"] for o in listed["items"]] == ["vd1"]
    assert daemon("get", "vd", "-o", "name").stdout == "virtualdisk.diskferry.io/vd1\n"
    secrets = daemon("get", "secrets").stdout
    assert "creds" in secrets and "hunter2" not in secrets
    nothing = daemon("get", "vdsnapshot")
    assert nothing.code == 0 and nothing.stdout == ""
    assert nothing.stderr == f"No resources found in {daemon.namespace} namespace.\n"
    unknown = daemon("get", "bogus")
    assert unknown.code == 1
    assert unknown.error == 'the server doesn\'t have a resource type "bogus"'


def test_get_all_namespaces_shows_the_namespace_column(daemon) -> None:
    mine, other = daemon.namespace, f"{daemon.namespace}-b"
    daemon("apply", "-f", daemon.manifest("ns-b.yaml", namespace(other)))
    elsewhere = daemon.manifest("vd2.yaml", disk("vd2", other))
    refused = daemon("apply", "-f", elsewhere)
    assert refused.error == (
        f"{elsewhere}: the namespace of the object ({other}) does not match the namespace"
        f" given ({mine})"
    )
    assert daemon("apply", "-f", elsewhere, "-n", other).code == 0
    assert daemon("apply", "-f", daemon.manifest("vd1.yaml", disk("vd1"))).code == 0
    only_other = daemon("get", "vd", "-n", other).stdout.splitlines()
    assert [row.split()[0] for row in only_other[1:]] == ["vd2"]
    every = daemon("get", "vd", "-A").stdout.splitlines()
    assert every[0].split()[:2] == ["NAMESPACE", "NAME"]
    rows = sorted(tuple(row.split()[:2]) for row in every[1:] if row.startswith(mine))
    assert rows == [(mine, "vd1"), (other, "vd2")]


def test_describe_shows_fields_conditions_and_events(daemon) -> None:
    daemon("apply", "-f", daemon.manifest("set.yaml", SECRET_AND_DISK))
    uid = json.loads(daemon("get", "vd", "vd1", "-o", "json").stdout)["metadata"]["uid"]
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "vd1.provisioning"},
        "involvedObject": {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "VirtualDisk",
            "name": "vd1",
            "namespace": daemon.namespace,
            "uid": uid,
        },
        "reason": "Provisioning",
        "message": "importing from the source",
        "type": "Normal",
        "source": {"component": "virtualdisk-controller"},
    }
    assert daemon("apply", "-f", daemon.manifest("event.yaml", yaml.safe_dump(event))).code == 0
    condition = {"type": "Ready", "status": "False", "reason": "Provisioning", "message": "copying"}
    daemon.set_status("vd", "vd1", {"phase": "Provisioning", "conditions": [condition]})
    shown = daemon("describe", "vd", "vd1")
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["Name:", "vd1"]
    assert "Labels:       tier=gold" in lines
    assert "  Persistent Volume Claim:" in lines and "    Size:  64Mi" in lines
    assert any(line.split() == ["Phase:", "Provisioning"] for line in lines)
    conditions = lines.index("  Conditions:")
    assert lines[conditions + 3].split() == ["Ready", "False", "Provisioning", "copying"]
    events = lines.index("Events:")
    assert lines[events + 1].split() == ["Type", "Reason", "Age", "From", "Message"]
    row = lines[events + 3].split()
    assert row[:2] == ["Normal", "Provisioning"] and "virtualdisk-controller" in row
    assert lines[events + 3].endswith("importing from the source")
    secret = daemon("describe", "secret", "creds").stdout
    assert "password:  19 bytes" in secret and "hunter2" not in secret
    assert "Events:  <none>" in secret


def test_delete_wait_returns_once_the_object_is_gone(daemon) -> None:
    daemon("apply", "-f", daemon.manifest("vd.yaml", disk("vd1")))
    daemon.kubectl(
        "patch", "vd", "vd1", "--type=merge", "-p", '{"metadata":{"finalizers":["x.io/hold"]}}'
    )
    deleting = daemon.start("delete", "vd", "vd1", "--wait")
    assert deleting.stdout.readline() == 'virtualdisk.diskferry.io "vd1" deleted\n'
    held = json.loads(daemon("get", "vd", "vd1", "-o", "json").stdout)
    assert held["metadata"]["deletionTimestamp"]
    assert deleting.poll() is None
    daemon.kubectl("patch", "vd", "vd1", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    assert deleting.wait(timeout=30) == 0, deleting.stderr.read()
    gone = daemon("get", "vd", "vd1")
    assert gone.code == 1 and "not found" in gone.error


def test_wait_for_a_phase_times_out_and_fails_with_the_reason(daemon) -> None:
    daemon("apply", "-f", daemon.manifest("vd.yaml", disk("vd1")))
    timed_out = daemon("wait", "vd", "vd1", "--for=phase=Ready", "--timeout", "1s")
    assert timed_out.code == 1
    assert timed_out.error.startswith(
        "timed out after 1s waiting for virtualdisk.diskferry.io/vd1 to have phase Ready"
    )
    daemon.set_status("vd", "vd1", {"phase": "Provisioning"})
    assert daemon("wait", "vd", "vd1", "--for", "phase=Provisioning").stdout == (
        "virtualdisk.diskferry.io/vd1 condition met\n"
    )
    condition = {"type": "Ready", "status": "False", "reason": "ImportFailed", "message": "404"}
    daemon.set_status("vd", "vd1", {"phase": "Failed", "conditions": [condition]})
    failed = daemon("wait", "vd", "vd1", "--for=condition=Ready", "--timeout", "5m")
    assert failed.code == 1
    assert failed.error == "virtualdisk.diskferry.io/vd1 failed: ImportFailed: 404"
    bad = daemon("wait", "vd", "vd1", "--for=readiness")
    assert bad.code == 2


def test_wait_follows_the_watch_until_the_phase_comes(daemon) -> None:
    daemon("apply", "-f", daemon.manifest("vd.yaml", disk("vd1")))
    waiting = daemon.start("wait", "vd", "vd1", "--for=phase=Ready", "--timeout=1m")
    daemon.set_status("vd", "vd1", {"phase": "Provisioning"})
    daemon.set_status("vd", "vd1", {"phase": "Ready"})
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert out == "virtualdisk.diskferry.io/vd1 condition met\n"


def test_get_watch_prints_each_change_with_progress_and_speed(daemon) -> None:
    daemon("apply", "-f", daemon.manifest("vd.yaml", disk("vd1")))
    watching = daemon.start("get", "vd", "-w")
    assert watching.stdout.readline().split() == ["NAME", "PHASE", "PROGRESS", "SPEED"]
    assert watching.stdout.readline().split() == ["vd1"]
    speed = {
        "avg": "2.0Mi/s",
        "avgBytes": "2097152",
        "current": "3.0Mi/s",
        "currentBytes": "3145728",
    }
    daemon.set_status(
        "vd", "vd1", {"phase": "Provisioning", "progress": "45.5%", "downloadSpeed": speed}
    )
    assert watching.stdout.readline().split() == ["vd1", "Provisioning", "45.5%", "3.0Mi/s"]
    daemon("apply", "-f", daemon.manifest("vd2.yaml", disk("vd2")))
    assert watching.stdout.readline().split() == ["vd2"]
    daemon.set_status("vd", "vd1", {"phase": "Ready", "progress": "100%"})
    assert watching.stdout.readline().split() == ["vd1", "Ready", "100%"]
    watching.send_signal(signal.SIGINT)
    assert watching.wait(timeout=30) == 130


BACKUP_AND_UPLOAD = """\
apiVersion: diskferry.io/v1alpha1
kind: Backup
metadata: {name: b1}
spec: {storageLocation: repo}
---
apiVersion: diskferry.io/v1alpha1
kind: DataUpload
metadata: {name: u1, annotations: {diskferry.io/vm-name: vm-a}}
spec: {backupStorageLocation: repo}
"""


def test_get_watch_shows_a_backups_items_and_a_datauploads_bytes_as_percent(daemon) -> None:
    """Velero's progress objects as cells: items done of total, bytes done as a percent."""
    daemon("apply", "-f", daemon.manifest("b.yaml", BACKUP_AND_UPLOAD))
    for kind, name, progress, cell in (
        ("backup", "b1", {"totalItems": 2, "itemsBackedUp": 1}, "1/2"),
        ("dataupload", "u1", {"totalBytes": 400, "bytesDone": 100}, "25%"),
    ):
        watching = daemon.start("get", kind, "-w")
        try:
            assert watching.stdout.readline().split() == ["NAME", "PHASE", "PROGRESS", "SPEED"]
            assert watching.stdout.readline().split()[0] == name
            daemon.set_status(kind, name, {"phase": "InProgress", "progress": progress})
            assert watching.stdout.readline().split() == [name, "InProgress", cell]
        finally:
            watching.send_signal(signal.SIGINT)
            watching.wait(timeout=30)


def test_logs_of_an_object_without_a_worker_is_one_line(daemon) -> None:
    daemon("apply", "-f", daemon.manifest("vd.yaml", disk("vd1")))
    none = daemon("logs", "vd", "vd1")
    assert none.code == 1 and "vd1" in none.error and none.stdout == ""
    missing = daemon("logs", "vd", "vd9")
    assert missing.code == 1 and "vd9" in missing.error


def _read_until(fd: int, wanted: list[str], timeout: float = 60) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while not all(w in seen for w in wanted):
        assert time.monotonic() < deadline, seen
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            seen += os.read(fd, 65536).decode(errors="replace")
    return seen


def test_get_watch_on_a_terminal_draws_a_bar_for_what_is_in_progress(daemon) -> None:
    daemon("apply", "-f", daemon.manifest("vd.yaml", disk("vd1") + "---\n" + disk("vd2")))
    daemon.set_status("vd", "vd2", {"phase": "Ready", "progress": "100%"})
    master, slave = pty.openpty()
    watching = subprocess.Popen(
        [str(EXE), "get", "vd", "-w", *daemon.options()],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**daemon.served.env, "COLUMNS": "120", "TERM": "xterm"},
    )
    os.close(slave)
    try:
        _read_until(master, ["NAME", "vd1", "vd2", "Ready"])
        speed = {"current": "3.0Mi/s"}
        daemon.set_status(
            "vd", "vd1", {"phase": "Provisioning", "progress": "45.5%", "downloadSpeed": speed}
        )
        drawn = _read_until(master, ["Provisioning", "45.5%", "3.0Mi/s"])
        assert "━" in drawn
        watching.send_signal(signal.SIGINT)
        assert watching.wait(timeout=30) == 130
    finally:
        watching.kill()
        os.close(master)


def test_a_bad_manifest_is_refused_with_the_field_path(daemon) -> None:
    bad = disk("vd1").replace("{size: 64Mi}", "{size: 64Mi, sise: 1}")
    refused = daemon("apply", "-f", daemon.manifest("bad.yaml", bad + "---\n" + disk("vd2")))
    assert refused.code == 1
    assert refused.error.startswith(f"{daemon.tmp / 'bad.yaml'}: ")
    assert "spec.persistentVolumeClaim.sise" in refused.error
    assert refused.stdout == "virtualdisk.diskferry.io/vd2 created\n"
    nameless = daemon("apply", "-f", daemon.manifest("nameless.yaml", "kind: VirtualDisk\n"))
    assert nameless.code == 1
    assert nameless.error.endswith("apiVersion, metadata.name not set")
    not_yaml = daemon("apply", "-f", daemon.manifest("broken.yaml", "a: [b\n"))
    assert not_yaml.code == 1 and "not YAML" in not_yaml.error


def test_the_kubeconfig_is_found_by_option_or_environment(daemon) -> None:
    daemon("apply", "-f", daemon.manifest("vd.yaml", disk("vd1")))
    kubeconfig = str(daemon.kubeconfig)
    by_env = {**daemon.served.env, "KUBECONFIG": kubeconfig}
    for extra, env in (([], by_env), (["--kubeconfig", kubeconfig], daemon.served.env)):
        found = subprocess.run(
            [str(EXE), "get", "vd", "-o", "name", "-n", daemon.namespace, *extra],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert found.stdout == "virtualdisk.diskferry.io/vd1\n", found.stderr


def test_a_daemon_that_is_not_running_is_one_line(daemon, diskferry, tmp_path) -> None:
    config = yaml.safe_load(daemon.kubeconfig.read_text())
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{unused.getsockname()[1]}"
    stopped = tmp_path / "stopped.kubeconfig"
    stopped.write_text(yaml.safe_dump(config))
    down = diskferry("get", "vd", "--kubeconfig", stopped)
    assert down.code == 1
    assert "is not running (connection refused)" in down.error
    assert down.error.endswith("start it with `diskferry serve`")
    missing = diskferry("get", "vd", "--data-dir", tmp_path / "nowhere")
    assert missing.code == 1
    assert missing.error.startswith(f"no daemon found: {tmp_path / 'nowhere' / 'kubeconfig'}")
    for text in (down.stderr, missing.stderr):
        assert daemon.token not in text


def test_a_wrong_token_is_the_servers_line_and_never_printed(daemon, diskferry, tmp_path) -> None:
    config = yaml.safe_load(daemon.kubeconfig.read_text())
    wrong = "wrong-token-0123456789"
    config["users"][0]["user"]["token"] = wrong
    path = tmp_path / "wrong.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    refused = diskferry("get", "vd", "--kubeconfig", path)
    assert refused.code == 1
    assert refused.error == "Unauthorized: the daemon does not accept the kubeconfig's token"
    assert wrong not in refused.stderr + refused.stdout


def test_engine_commands_work_without_a_daemon(diskferry, tmp_path) -> None:
    source = tmp_path / "source.raw"
    source.write_bytes(os.urandom(1 << 20))
    diskferry.env["KUBECONFIG"] = str(tmp_path / "nowhere" / "kubeconfig")
    done = diskferry("import", source, tmp_path / "target.raw", "--no-progress")
    assert done.code == 0, done.stderr
    assert (tmp_path / "target.raw").read_bytes() == source.read_bytes()
