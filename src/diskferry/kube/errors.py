"""What can go wrong between the operator and the cluster's API, beyond the API's own answers."""

from __future__ import annotations

from diskferry.base.errors import DiskferryError


class ClusterConfigError(DiskferryError):
    """There is no kubeconfig, or no service account in a Pod, to reach the cluster with."""


class ClusterUnreachableError(DiskferryError):
    """The cluster's API did not answer, or kept answering that it could not take the request,
    through every retry."""
