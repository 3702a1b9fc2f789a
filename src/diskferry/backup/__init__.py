"""Backup and restore: the deduplicating, encrypted repository and the engine on top of it.

Its face: the jobs (backup, restore and the repository's chores), their results and phases,
the functions that run them, the key files, and the errors; each loaded when first used
(diskferry.faces).
"""

from diskferry.faces import lazy_face

__all__, __getattr__, __dir__ = lazy_face(
    __name__,
    {
        "engine": ("BackupError", "run_backup"),
        "errors": (
            "CheckFailedError",
            "LockedError",
            "PasswordError",
            "RepositoryError",
            "RepositoryExistsError",
            "RepositoryNotFoundError",
            "SnapshotNotFoundError",
        ),
        "job": (
            "BackupJob",
            "BackupResult",
            "CbtJob",
            "ChainResetJob",
            "ChainResetResult",
            "CheckJob",
            "Chores",
            "ChoresJob",
            "ChoresResult",
            "DiskResult",
            "DiskSource",
            "DiskTransfer",
            "FailedHook",
            "ForgetJob",
            "ForgetResult",
            "Forgetting",
            "GuestHooksJob",
            "HookCommand",
            "HookOutcome",
            "HooksResult",
            "InitJob",
            "InitResult",
            "MetadataListing",
            "PruneJob",
            "PruneResult",
            "RepoAccess",
            "RestoreJob",
            "RestoreResult",
            "StoredMetadata",
            "UpgradeJob",
            "UpgradeResult",
        ),
        "key_ahead": ("begin as derive_key_ahead",),
        "key_ring": ("KeyInfo", "add_key", "change_password", "list_keys", "remove_key"),
        "ops": (
            "change_cbt",
            "check_repository",
            "forget_snapshots",
            "init_repository",
            "prune_repository",
            "reset_vm_chain",
            "upgrade_repository",
        ),
        "password": ("read_password",),
        "phases": ("BackupPhase", "RepoPhase", "RestorePhase"),
        "policy": ("KeepPolicy",),
        "prune": ("PruneStats", "Unused", "unused_space", "unused_text"),
        "restore": ("run_restore",),
        "snapshots": ("SnapshotInfo",),
    },
)
