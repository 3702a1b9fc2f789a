"""How the operator reaches the cluster's API: a kubeconfig, or in a Pod its service account
(KUBERNETES_SERVICE_HOST and the token Kubernetes mounts), as client-go finds them."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

from kubernetes import config
from kubernetes.client import ApiClient, Configuration

from diskferry import __version__
from diskferry.kube.errors import ClusterConfigError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SERVICE_HOST = "KUBERNETES_SERVICE_HOST"
POD_NAME = "POD_NAME"  # the Pod's own name and namespace, as a Deployment passes them down
POD_NAMESPACE = "POD_NAMESPACE"
DEFAULT_KUBECONFIG = Path(".kube/config")
USER_AGENT = f"diskferry-operator/{__version__}"
POOL_SIZE = 64  # a connection for each watch of a kind and each reconciling worker


def in_cluster() -> bool:
    """Whether this process runs in a Pod that Kubernetes gave its service's address."""
    return bool(os.environ.get(SERVICE_HOST))


def api_client(kubeconfig: Path | None = None, *, pool_size: int = POOL_SIZE) -> ApiClient:
    """A client of the cluster `kubeconfig` names (its current context); without one, of the
    cluster this Pod runs in, else of the one KUBECONFIG or ~/.kube/config names.

    Its requests are not retried by urllib3: the callers' bounded retries with backoff are the
    only ones. ClusterConfigError when no configuration is found or it cannot be read.
    """
    configuration = Configuration()
    load: Callable[[], None]
    if kubeconfig is None and in_cluster():
        where = "this Pod's service account"
        load = partial(config.load_incluster_config, client_configuration=configuration)
    else:
        where = str(kubeconfig or os.environ.get("KUBECONFIG") or Path.home() / DEFAULT_KUBECONFIG)
        load = partial(
            config.load_kube_config,
            config_file=where,
            client_configuration=configuration,
            persist_config=False,
        )
    try:
        load()
    except (config.ConfigException, OSError) as error:
        raise ClusterConfigError(f"cannot reach a cluster through {where}: {error}") from None
    configuration.retries = False
    configuration.connection_pool_maxsize = pool_size
    client = ApiClient(configuration)
    client.user_agent = USER_AGENT
    return client


def own_namespace(default: str) -> str:
    """The namespace this Pod runs in (POD_NAMESPACE, else its service account says), else
    `default`."""
    if os.environ.get(POD_NAMESPACE):
        return os.environ[POD_NAMESPACE]
    try:
        return (SERVICE_ACCOUNT / "namespace").read_text().strip() or default
    except OSError:
        return default
