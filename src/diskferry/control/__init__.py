"""The control plane, as four systems and their assembly: the API server (`apiserver`), the kinds'
models (`resources`), the controller runtime (`runtime`), the host's services (`host`) and the
reconcilers, one folder per family of kinds; `controllers` wires the reconcilers to a manager,
`daemon` runs it all over one data directory."""
