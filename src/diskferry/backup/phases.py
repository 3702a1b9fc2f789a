"""The phases of the backup engine's jobs, as /progress shows them."""

from enum import StrEnum


class BackupPhase(StrEnum):
    """What a backup is doing."""

    STARTING = "Starting"
    READING = "Reading"
    SAVING_TRACKER = "SavingTracker"


class RestorePhase(StrEnum):
    """What a restore is doing."""

    STARTING = "Starting"
    RESTORING = "Restoring"
    CONVERTING = "Converting"


class RepoPhase(StrEnum):
    """What a repository operation is doing."""

    OPENING = "Opening"
    INITIALIZING = "Initializing"
    CHECKING = "Checking"
    FORGETTING = "Forgetting"
    PRUNING = "Pruning"
    RESETTING_CHAIN = "ResettingChain"
    CHANGING_CBT = "ChangingCbt"
    UPGRADING = "Upgrading"
