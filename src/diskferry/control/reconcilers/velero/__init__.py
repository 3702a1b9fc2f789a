"""Velero's kinds: Backup (its metadata in the repository, what its deletion lets go, its sync
from a location), BackupStorageLocation and the repository access it gives a worker,
Schedule, Restore, and the hooks, resource selection and volume policy they share."""
