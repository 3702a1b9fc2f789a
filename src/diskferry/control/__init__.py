"""The control plane, as systems layered one over the next: the reconcilers, one folder per
family of kinds; the host's services (`host`); the controller runtime (`runtime`); the API
server (`apiserver`); the kinds' models and descriptions (`resources`); and beneath them all the
API's errors (`errors`) and the store's time (`clock`). `controllers` wires the reconcilers to a
manager, `daemon` runs the API over one data directory."""
