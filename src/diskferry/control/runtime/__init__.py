"""The controller runtime: a work queue keyed by object, reconcilers, the client they use, the
manager that feeds them from watches."""
