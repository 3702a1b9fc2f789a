"""The servers' CA in a cluster outlives the operator's Pod: it is kept in a Secret of the
operator's namespace, and the data directory (an emptyDir, gone with the Pod) holds only a
copy to issue from. A certificate issued before a restart verifies against the CA after it,
and the other way round; two operators that start at once store one CA between them."""

from __future__ import annotations

import base64
import shutil
import threading
from pathlib import Path
from typing import Any

from cryptography import x509

from diskferry.kube.api import KubeApi
from diskferry.kube.certs import CA_SECRET, SecretCa
from diskferry.serving.certs import CA_CERT, CA_KEY
from diskferry.serving.tls import TLS_CERT

NAMES = ["virt-export-exp.default.svc"]
WAIT_SECONDS = 30


def _signed_by(chain: bytes, ca: bytes) -> None:
    """Fails unless the chain's first certificate was issued by the CA `ca` (PEM)."""
    issuer = x509.load_pem_x509_certificate(ca)
    x509.load_pem_x509_certificate(chain).verify_directly_issued_by(issuer)


def test_a_certificate_issued_before_a_restart_verifies_after_it(
    api: KubeApi, namespace: str, tmp_path: Path
) -> None:
    before = SecretCa(api, namespace, tmp_path / "pod-1" / "pki")
    issued = before.files(NAMES)
    shutil.rmtree(tmp_path / "pod-1")  # the Pod's emptyDir goes with it
    after = SecretCa(api, namespace, tmp_path / "pod-2" / "pki")
    _signed_by(issued[TLS_CERT], after.ca_pem())
    _signed_by(after.files(NAMES)[TLS_CERT], issued[CA_CERT])
    assert after.ca_pem() == issued[CA_CERT]
    assert (tmp_path / "pod-2" / "pki" / CA_KEY).stat().st_mode & 0o777 == 0o600


class AtOnce:
    """The API as one of two operators starting at once sees it: each reads the Secret before
    either stores its own."""

    def __init__(self, api: KubeApi, both_read: threading.Barrier) -> None:
        self.api = api
        self.both_read = both_read
        self.reads = 0

    def get(self, *what: Any) -> dict[str, Any] | None:
        found = self.api.get(*what)
        self.reads += 1
        if self.reads == 1:
            self.both_read.wait(WAIT_SECONDS)
        return found

    def create(self, *what: Any) -> dict[str, Any]:
        return self.api.create(*what)


def test_two_operators_starting_at_once_store_one_ca(
    api: KubeApi, namespace: str, tmp_path: Path
) -> None:
    both_read = threading.Barrier(2)
    instances = [
        SecretCa(AtOnce(api, both_read), namespace, tmp_path / name)  # type: ignore[arg-type]
        for name in ("first", "second")
    ]
    seen: dict[int, bytes] = {}
    threads = [
        threading.Thread(target=lambda n=n, ca=ca: seen.update({n: ca.ca_pem()}))
        for n, ca in enumerate(instances)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_SECONDS)
    secret = api.get("v1", "Secret", namespace, CA_SECRET) or {}
    stored = base64.b64decode(secret["data"][TLS_CERT])
    assert seen == {0: stored, 1: stored}
    keys = {(tmp_path / name / CA_KEY).read_bytes() for name in ("first", "second")}
    assert len(keys) == 1
