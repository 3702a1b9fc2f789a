"""The controller runtime: a work queue keyed by object, reconcilers, the client they use, the
manager that feeds them from watches, the runner that starts their workers and the job
life they go through (`runner`), and the status, Event, progress and finalizer helpers every
reconciler shares (`phases`, `progress`, `finalizer`)."""
