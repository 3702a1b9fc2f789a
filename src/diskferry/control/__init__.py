"""The control plane: resources in the Kubernetes shape, their store and API, and reconcilers."""
