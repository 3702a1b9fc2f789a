"""The cluster's API as a Pod reaches it: the address Kubernetes gives every container
(KUBERNETES_SERVICE_HOST and _PORT) and the ServiceAccount token and CA it mounts, as client
libraries find them in a cluster. The proxy asks it one thing: whether an export's Service
exists, which tells an export whose server has no address yet from one that does not exist.
The token file is read again for every request, as a projected token is renewed."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from pydantic import Field

from diskferry.worker.job import JobModel

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where Kubernetes mounts a Pod's ServiceAccount token (`token`) and the API's CA (`ca.crt`)."""
TOKEN_LIMIT = 64 << 10


class TokenUnreadableError(OSError):
    """The ServiceAccount token is missing, empty or larger than TOKEN_LIMIT."""


class ClusterApi(JobModel):
    """Where the cluster's API is, and the files that authenticate to it and verify it."""

    url: str = Field(description="the API's base URL, https://HOST:PORT")
    token_file: str = Field(alias="tokenFile", description="the ServiceAccount token's file")
    ca_file: str = Field(alias="caFile", description="the CA file that verifies the API")

    @classmethod
    def in_cluster(
        cls, environ: Mapping[str, str] = os.environ, folder: Path = SERVICE_ACCOUNT
    ) -> ClusterApi | None:
        """The API of the cluster this process runs in as a Pod; None outside a Pod, or in
        one given no ServiceAccount token."""
        host = environ.get("KUBERNETES_SERVICE_HOST")
        port = environ.get("KUBERNETES_SERVICE_PORT")
        token = folder / "token"
        if not host or not port or not token.is_file():
            return None
        shown = f"[{host}]" if ":" in host else host
        return cls(
            url=f"https://{shown}:{port}", token_file=str(token), ca_file=str(folder / "ca.crt")
        )

    def service_url(self, namespace: str, name: str) -> str:
        """The URL of the Service `name` of `namespace`."""
        where = f"namespaces/{quote(namespace, safe='')}/services/{quote(name, safe='')}"
        return f"{self.url}/api/v1/{where}"

    def headers(self) -> dict[str, str]:
        """The headers of a request: the token as it is now (TokenUnreadableError when it cannot
        be read)."""
        try:
            with open(self.token_file, "rb") as f:
                token = f.read(TOKEN_LIMIT + 1).strip()
        except OSError as e:
            raise TokenUnreadableError(
                f"cannot read the token {self.token_file}: {e.strerror}"
            ) from None
        if not token or len(token) > TOKEN_LIMIT:
            raise TokenUnreadableError(f"the token {self.token_file} is empty or too large")
        return {
            "Authorization": f"Bearer {token.decode('ascii', 'replace')}",
            "Accept": "application/json",
        }
