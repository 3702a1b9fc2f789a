"""The certificates of the servers the operator starts, in a cluster (`host.certs`): issued as
the daemon's are (short-lived, renewed at half their life in the running job), from one CA kept
in the Secret `diskferry-export-ca` of the operator's namespace (`tls.crt`, `tls.key`), so that
every instance that leads, and one started again, issues from the same CA and the links,
Route and proxy that name it stay true. The first instance that finds no Secret makes the CA
and stores it; the CA is copied into the instance's data directory to issue from."""

from __future__ import annotations

import base64
import threading
from datetime import timedelta
from pathlib import Path

from diskferry.base.errors import DiskferryError
from diskferry.control.apiserver.pki import write_private
from diskferry.control.clock import Clock
from diskferry.control.errors import AlreadyExistsError
from diskferry.control.host.embedded.certs import CERT_LIFETIME, DaemonCa
from diskferry.kube.api import KubeApi
from diskferry.serving.certs import CA_CERT, CA_KEY
from diskferry.serving.tls import TLS_CERT, TLS_KEY

SECRET = ("v1", "Secret")
CA_SECRET = "diskferry-export-ca"


class CaSecretError(DiskferryError):
    """The Secret of the servers' CA holds no CA."""

    reason = "BadCaSecret"


class SecretCa(DaemonCa):
    """A DaemonCa over `pki_dir` whose CA is the one in the Secret `name` of `namespace`."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        pki_dir: Path,
        name: str = CA_SECRET,
        lifetime: timedelta = CERT_LIFETIME,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(pki_dir, lifetime, clock)
        self.api = api
        self.namespace = namespace
        self.name = name
        self._synced = False
        self._syncing = threading.Lock()

    def ca_pem(self) -> bytes:
        """The CA certificate in PEM, the Secret's (made from this instance's CA when there is
        none yet)."""
        with self._syncing:
            if not self._synced:
                self._sync()
                self._synced = True
        return super().ca_pem()

    def _sync(self) -> None:
        """Take the Secret's CA into the data directory, or store this one's in a new Secret."""
        found = self.api.get(*SECRET, self.namespace, self.name)
        if found is None:
            cert = super().ca_pem()
            key = (self.pki_dir / CA_KEY).read_bytes()
            try:
                self.api.create(*SECRET, self.namespace, self._secret(cert, key))
                return
            except AlreadyExistsError:  # another instance stored its own first: take it
                found = self.api.get(*SECRET, self.namespace, self.name) or {}
        data = found.get("data") or {}
        if not data.get(TLS_CERT) or not data.get(TLS_KEY):
            raise CaSecretError(
                f"the Secret {self.namespace}/{self.name} holds no {TLS_CERT} and {TLS_KEY}: "
                "delete it, and the operator makes a new CA"
            )
        self.pki_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(self.pki_dir / CA_KEY, base64.b64decode(data[TLS_KEY]))
        write_private(self.pki_dir / CA_CERT, base64.b64decode(data[TLS_CERT]))

    def _secret(self, cert: bytes, key: bytes) -> dict[str, object]:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/name": "diskferry"},
            },
            "data": {
                TLS_CERT: base64.b64encode(cert).decode(),
                TLS_KEY: base64.b64encode(key).decode(),
            },
        }
