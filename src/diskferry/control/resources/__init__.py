"""The kinds' models: each resource's spec and status as pydantic models, the Kubernetes shape
they share (`model`), the values their fields hold (`quantity`, `duration`, `names`), the label
selector language (`labels`), each kind's description (`kinds`), and the registry of every kind
the daemon serves (`registry`)."""
