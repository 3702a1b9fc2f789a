"""The Kubernetes-shaped HTTP API of the daemon: discovery, resources, watch, tables, OpenAPI."""
