"""The one interface engines report through: notes, and events with a type, reason and message.

The CLI prints each as a note on stderr; a worker keeps the last few for /progress and
logs them. Engine-specific facts (an export's port and URLs) are published as details.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

NOTE = "Note"


class EventType(StrEnum):
    """How an event reads, as in Kubernetes events."""

    NORMAL = "Normal"
    WARNING = "Warning"


class Reporter:
    """Where an engine's notes, events and details go; this base drops them all."""

    def event(self, type: EventType, reason: str, message: str) -> None:
        """Tell of something that happened; `reason` is one CamelCase word."""

    def note(self, message: str) -> None:
        """Tell something in passing: a Normal event with reason Note."""
        self.event(EventType.NORMAL, NOTE, message)

    def warn(self, reason: str, message: str) -> None:
        """Tell of something the user should look at: a Warning event."""
        self.event(EventType.WARNING, reason, message)

    def details(self, **facts: Any) -> None:
        """Publish engine-specific facts (JSON values), merged over those published before."""


QUIET = Reporter()
