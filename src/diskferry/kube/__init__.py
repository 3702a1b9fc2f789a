"""The cluster shape: a Kubernetes client library behind the control plane's Client and Source
protocols, leader election on a Lease, and `diskferry operator`, which runs the same reconcilers
as `diskferry serve` against a cluster's API."""
