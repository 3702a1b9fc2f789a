"""The daemon's memory under hostile API clients: each attack is refused, and the peak RSS
(VmHWM) of the `diskferry serve` process grows by a bounded amount while it is made."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from daemon_support import Served, start_daemon

from diskferry.control.apiserver.http.limits import MAX_BODY_BYTES
from diskferry.control.apiserver.http.watch import MAX_WATCHES_PER_CLIENT
from diskferry.control.apiserver.store.values import MAX_DEPTH

MiB = 1 << 20
VD = "/apis/diskferry.io/v1alpha1/namespaces/default/virtualdisks"
SENT = 96 * MiB


def _disk(name: str, **meta: object) -> dict:
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualDisk",
        "metadata": {"name": name, **meta},
        "spec": {"persistentVolumeClaim": {"size": "64Mi"}},
    }


@dataclass
class Api:
    """A client of a running daemon, and the daemon's memory as the kernel counts it."""

    served: Served
    context: ssl.SSLContext
    ca: Path

    def _memory(self, field: str) -> int:
        status = Path(f"/proc/{self.served.process.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith(f"{field}:"))
        return int(line.split()[1]) * 1024

    def peak(self) -> int:
        """The daemon's peak resident memory so far (VmHWM), in bytes."""
        return self._memory("VmHWM")

    def resident(self) -> int:
        """The daemon's resident memory now (VmRSS), in bytes."""
        return self._memory("VmRSS")

    def connect(self) -> http.client.HTTPSConnection:
        """A new connection to the API."""
        return http.client.HTTPSConnection(
            "127.0.0.1", self.served.port, context=self.context, timeout=120
        )

    def headers(self, content_type: str = "application/json") -> dict[str, str]:
        """The token, and the body's type."""
        return {"Authorization": f"Bearer {self.served.token()}", "Content-Type": content_type}

    def request(
        self, method: str, path: str, body: bytes | str | None = None, **headers: str
    ) -> tuple[int, dict]:
        """The status code and the JSON answer of one request."""
        connection = self.connect()
        try:
            connection.request(method, path, body=body, headers={**self.headers(), **headers})
            answer = connection.getresponse()
            return answer.status, json.loads(answer.read() or b"{}")
        finally:
            connection.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    """A daemon of its own (a peak is the process's), without controllers."""
    served = start_daemon(tmp_path / "data", tmp_path / "log")
    cluster = yaml.safe_load(served.kubeconfig.read_text())["clusters"][0]["cluster"]
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    try:
        yield Api(served, ssl.create_default_context(cafile=str(ca)), ca)
    finally:
        assert served.stop() == 0
        assert "Traceback" not in served.log.read_text()


def _bomb(levels: int) -> str:
    """YAML whose aliases name each level 9 times: 9**levels strings once expanded."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, levels)]
    return "\n".join(lines)


def test_a_yaml_alias_bomb_is_400_without_expanding(api: Api) -> None:
    bomb = _bomb(7)
    fields = "\n".join("    " + line for line in bomb.splitlines())
    text = (
        "apiVersion: diskferry.io/v1alpha1\nkind: VirtualDisk\nmetadata:\n  name: bomb\n"
        "  managedFields:\n  - manager: m\n    operation: Apply\n    fieldsV1:\n"
        f"{fields}\nspec: {{persistentVolumeClaim: {{size: 1Mi}}}}\n"
    )
    assert len(text) < 1024
    before = api.peak()
    status, answer = api.request("POST", VD, text, **{"Content-Type": "application/yaml"})
    assert api.peak() - before < 16 * MiB
    assert status == 400 and "alias" in answer["message"]


def test_nested_bodies_and_patches_are_400(api: Api) -> None:
    assert api.request("POST", VD, json.dumps(_disk("vd1")))[0] == 201
    deep = "[" * 50_000 + "]" * 50_000
    block = "".join(f"{' ' * n}a:\n" for n in range(MAX_DEPTH + 1)) + " " * (MAX_DEPTH + 1) + "b"
    before = api.peak()
    answers = [
        api.request(method, path, body, **{"Content-Type": content_type})
        for method, path, body, content_type in [
            ("POST", VD, deep, "application/json"),
            ("POST", VD, deep, "application/yaml"),
            ("POST", VD, block, "application/yaml"),
            ("PATCH", f"{VD}/vd1", deep, "application/merge-patch+json"),
            ("PATCH", f"{VD}/vd1", deep, "application/json-patch+json"),
            ("PATCH", f"{VD}/vd1?fieldManager=m", block, "application/apply-patch+yaml"),
        ]
    ]
    assert api.peak() - before < 16 * MiB
    for status, answer in answers:
        assert status == 400 and "nest" in answer["message"], answer


def test_a_json_patch_that_doubles_the_object_is_refused(api: Api) -> None:
    assert api.request("POST", VD, json.dumps(_disk("vd1")))[0] == 201
    operations = [{"op": "copy", "from": "/spec", "path": f"/spec/c{n}"} for n in range(20)]
    before = api.peak()
    status, answer = api.request(
        "PATCH",
        f"{VD}/vd1",
        json.dumps(operations),
        **{"Content-Type": "application/json-patch+json"},
    )
    # copies up to an object's size in all (parsed, ten times that), not 2**20 of the spec
    assert api.peak() - before < 48 * MiB
    assert status == 413 and answer["reason"] == "RequestEntityTooLarge"


def test_requests_that_change_objects_are_bounded_in_flight(api: Api) -> None:
    def create(n: int) -> None:
        # 200 000 annotations: 2.75 MiB of JSON, parsed and copied to some 100 MB
        disk = _disk(f"d{n}", annotations={f"k{k}": "" for k in range(200_000)})
        connection = api.connect()
        try:
            connection.request("POST", VD, body=json.dumps(disk), headers=api.headers())
            response = connection.getresponse()
            answers.append((response.status, response.getheader("Retry-After")))
            response.read()
        finally:
            connection.close()

    answers: list[tuple[int, str | None]] = []
    clients = [threading.Thread(target=create, args=(n,)) for n in range(24)]
    before = api.peak()
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    # all 24 at once took 740 MB, and stored every one of them
    assert api.peak() - before < 320 * MiB
    assert len(answers) == 24
    assert set(answers) <= {(413, None), (429, "1")}


def _curl(api: Api, tmp_path: Path, *args: str, stdin=None) -> tuple[str, int]:
    """The status code curl got for a POST of a body it streams, and the bytes it sent."""
    headers = tmp_path / "headers"
    headers.write_text("".join(f"{k}: {v}\n" for k, v in api.headers().items()))
    headers.chmod(0o600)
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "--cacert",
            str(api.ca),
            "-H",
            f"@{headers}",
            "-X",
            "POST",
            *args,
            "-o",
            str(tmp_path / "answer"),
            "-w",
            "%{http_code} %{size_upload}",
            f"https://127.0.0.1:{api.served.port}{VD}",
        ],
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    code, sent = done.stdout.split()
    return code, int(float(sent))


def test_a_body_of_96_mib_is_cut_at_the_limit(api: Api, tmp_path: Path) -> None:
    declared = tmp_path / "declared"
    with open(declared, "wb") as f:
        f.truncate(SENT)
    before = api.peak()
    code, _ = _curl(api, tmp_path, "--data-binary", f"@{declared}")
    declared_answer = json.loads((tmp_path / "answer").read_text())
    zeros = subprocess.Popen(["head", "-c", str(SENT), "/dev/zero"], stdout=subprocess.PIPE)
    chunked_code, sent = _curl(api, tmp_path, "-T", "-", stdin=zeros.stdout)
    zeros.kill()
    zeros.wait()
    assert api.peak() - before < MAX_BODY_BYTES + 16 * MiB
    assert sent < SENT // 4
    assert code == chunked_code == "413"
    assert declared_answer["reason"] == "RequestEntityTooLarge"
    assert json.loads((tmp_path / "answer").read_text())["reason"] == "RequestEntityTooLarge"


def test_a_non_ascii_token_is_401(api: Api) -> None:
    connection = api.connect()
    try:
        connection.putrequest("GET", VD)
        connection.putheader("Authorization", b"Bearer \xc3\xa9t\xc3\xa9")
        connection.endheaders()
        answer = connection.getresponse()
        assert answer.status == 401
        assert json.loads(answer.read())["reason"] == "Unauthorized"
    finally:
        connection.close()


class _Watching:
    """A watch that counts the events it reads, until the daemon ends it."""

    def __init__(self, api: Api, rv: str) -> None:
        self.connection = api.connect()
        self.connection.request(
            "GET", f"{VD}?watch=true&resourceVersion={rv}", headers=api.headers()
        )
        self.answer = self.connection.getresponse()
        self.events = 0
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        if self.answer.status == 200:
            self.reader.start()

    def _read(self) -> None:
        try:
            while self.answer.readline():
                with self.changed:
                    self.events += 1
                    self.changed.notify_all()
        except (OSError, http.client.HTTPException):
            pass  # hung up

    def wait_for(self, events: int) -> bool:
        """Whether `events` events came (in the 60 s a test may wait)."""
        with self.changed:
            return self.changed.wait_for(lambda: self.events >= events, 60)

    def close(self) -> None:
        """Hang up, and let the reader end."""
        if self.reader.is_alive():
            self.connection.sock.shutdown(socket.SHUT_RDWR)
            self.reader.join()
        self.connection.close()


def test_watches_share_each_event_and_are_bounded(api: Api) -> None:
    big = _disk("big", annotations={f"k{n}": "v" * 10 for n in range(30_000)})
    assert 600_000 < len(json.dumps(big)) < 800_000
    status, created = api.request("POST", VD, json.dumps(big))
    assert status == 201
    rv = created["metadata"]["resourceVersion"]
    before = api.peak()
    watches = [_Watching(api, rv) for _ in range(MAX_WATCHES_PER_CLIENT)]
    assert {w.answer.status for w in watches} == {200}
    for n in range(3):
        patch = json.dumps({"metadata": {"annotations": {"k0": f"changed {n}"}}})
        merge = {"Content-Type": "application/merge-patch+json"}
        assert api.request("PATCH", f"{VD}/big", patch, **merge)[0] == 200
    assert all(w.wait_for(3) for w in watches)
    # each watch a parsed copy of each event (12 MB a watch) took 400 MB; one shared copy
    # and each watch's line in flight take tens
    assert api.peak() - before < 96 * MiB
    refused = _Watching(api, rv)
    try:
        assert refused.answer.status == 429
        assert refused.answer.getheader("Retry-After") == "1"
        assert json.loads(refused.answer.read())["reason"] == "TooManyRequests"
    finally:
        refused.close()
        for w in watches:
            w.close()
