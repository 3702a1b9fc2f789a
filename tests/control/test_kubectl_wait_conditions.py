"""`kubectl wait --for=condition=TYPE` (and `=False`) against a real `diskferry serve`, for every
condition type every kind declares: it returns once the condition is written as a controller
writes it (a merge patch of the status subresource) and times out while it is not so; and
`kubectl explain KIND.status.conditions` names each type. The cases come from the kinds'
declarations, so a condition declared later is covered without a change here."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from crd_support import EXAMPLES, example_documents
from daemon_support import Served, kubectl, start_daemon

from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.registry import REGISTRY

NAMESPACE = "default"
NOT_YET = "1s"
"""The timeout of a wait that must time out: long beside one GET, short beside the test."""
MET_SECONDS = 60
"""How long a wait that must end is given."""
DECLARING = [info for info in REGISTRY.kinds if info.model.CONDITIONS]


@dataclass(frozen=True)
class Case:
    """One condition type of one kind, and the object of that kind it is tried on."""

    info: KindInfo
    type: str

    @property
    def name(self) -> str:
        """The object's name: the type's, in lower case."""
        return self.type.lower()

    @property
    def ref(self) -> str:
        """The object as kubectl names it: `plural.group/name`."""
        return f"{self.info.plural}.{self.info.group}/{self.name}"

    @property
    def where(self) -> list[str]:
        """kubectl's namespace arguments for the object."""
        return ["--namespace", NAMESPACE] if self.info.namespaced else []


CASES = [Case(info, kind) for info in DECLARING for kind in info.model.CONDITIONS]


def manifest(case: Case) -> dict[str, Any]:
    """The object `case` is tried on: its kind's first example, under the case's name."""
    found = next((doc for doc in example_documents() if doc["kind"] == case.info.kind), None)
    assert found is not None, f"no example of {case.info.kind} in {EXAMPLES}: add one"
    metadata = {"name": case.name}
    if case.info.namespaced:
        metadata["namespace"] = NAMESPACE
    return {**found, "metadata": metadata}


@dataclass
class StatusWriter:
    """Writes conditions as a controller does: a merge patch of the status subresource."""

    served: Served
    context: ssl.SSLContext

    def write(self, case: Case, status: str) -> None:
        """Set the status of `case`'s object to hold its one condition, `status`."""
        info = case.info
        where = f"/namespaces/{NAMESPACE}" if info.namespaced else ""
        path = f"/apis/{info.group}/{info.version}{where}/{info.plural}/{case.name}/status"
        condition = {"type": case.type, "status": status, "reason": "Written", "message": "test"}
        body = json.dumps({"status": {"conditions": [condition]}})
        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.served.port, context=self.context, timeout=MET_SECONDS
        )
        try:
            headers = {
                "Authorization": f"Bearer {self.served.token()}",
                "Content-Type": "application/merge-patch+json",
            }
            connection.request("PATCH", path, body=body, headers=headers)
            answer = connection.getresponse()
            assert answer.status == 200, answer.read()[:500]
            answer.read()
        finally:
            connection.close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One daemon without controllers, holding an object for each case."""
    base = tmp_path_factory.mktemp("wait-conditions")
    served = start_daemon(base / "data", base / "daemon.log")
    try:
        documents = yaml.safe_dump_all([manifest(case) for case in CASES])
        kubectl(served, "apply", "-f", "-", stdin=documents)
        yield served
    finally:
        assert served.stop() == 0


@pytest.fixture(scope="module")
def writer(daemon: Served, tmp_path_factory: pytest.TempPathFactory) -> StatusWriter:
    """The status writer of the module's daemon, trusting its CA."""
    cluster = yaml.safe_load(daemon.kubeconfig.read_text())["clusters"][0]["cluster"]
    ca = tmp_path_factory.mktemp("ca") / "ca.crt"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    return StatusWriter(daemon, ssl.create_default_context(cafile=str(ca)))


def _wait_args(daemon: Served, case: Case, wanted: str, timeout: str) -> list[str]:
    return [
        "kubectl",
        "--kubeconfig",
        str(daemon.kubeconfig),
        "--cache-dir",
        str(daemon.data_dir.parent / "kube-cache"),
        "wait",
        case.ref,
        *case.where,
        f"--for=condition={wanted}",
        f"--timeout={timeout}",
    ]


def times_out(daemon: Served, case: Case, wanted: str) -> None:
    """`kubectl wait --for=condition=WANTED` gives up after its short timeout."""
    done = subprocess.run(
        _wait_args(daemon, case, wanted, NOT_YET), capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0, f"{case.ref}: {wanted} is met already: {done.stdout}"
    assert "timed out waiting for the condition" in done.stderr, done.stderr


def met_once_written(daemon: Served, writer: StatusWriter, case: Case, status: str) -> None:
    """A `kubectl wait` for the condition at `status`, started before it is written, returns
    once it is, saying so."""
    wanted = case.type if status == "True" else f"{case.type}={status}"
    args = _wait_args(daemon, case, wanted, f"{MET_SECONDS}s")
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as wait:
        writer.write(case, status)
        out, err = wait.communicate(timeout=MET_SECONDS + 10)
    assert wait.returncode == 0, f"{case.ref}: {wanted}: {err}"
    assert "condition met" in out, out


@pytest.mark.parametrize("case", CASES, ids=[f"{c.info.kind}-{c.type}" for c in CASES])
def test_kubectl_waits_for_each_declared_condition(
    daemon: Served, writer: StatusWriter, case: Case
) -> None:
    times_out(daemon, case, case.type)
    met_once_written(daemon, writer, case, "True")
    times_out(daemon, case, f"{case.type}=False")
    met_once_written(daemon, writer, case, "False")
    times_out(daemon, case, case.type)


@pytest.mark.parametrize("info", DECLARING, ids=[info.kind for info in DECLARING])
def test_kubectl_explain_names_each_declared_condition(daemon: Served, info: KindInfo) -> None:
    text = kubectl(daemon, "explain", f"{info.plural}.status.conditions")
    missing = [kind for kind in info.model.CONDITIONS if f"{kind}:" not in text]
    assert not missing, f"kubectl explain {info.plural}.status.conditions lacks {missing}"
