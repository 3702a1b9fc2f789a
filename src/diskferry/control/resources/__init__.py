"""The kinds' models: each resource's spec and status as pydantic models, the Kubernetes shape
they share (`model`), the values their fields hold (`quantity`, `duration`, `names`), and the
registry of every kind the daemon serves (`registry`)."""
