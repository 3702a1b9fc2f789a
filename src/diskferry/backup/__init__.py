"""Backup and restore: the deduplicating, encrypted repository and the engine on top of it."""
