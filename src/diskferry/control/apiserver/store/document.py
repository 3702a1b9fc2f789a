"""One object's JSON as the store encoded it: sent as it is, parsed at most once, and shared."""

from __future__ import annotations

import json
import threading
from typing import Any


class Document:
    """An object's encoded JSON and, once asked for, its value.

    Every watch that sees the object holds this one Document: the text is what a watch
    sends, and the value is parsed once for all of them. Readers must not change the value.
    """

    __slots__ = ("_lock", "_value", "text")

    def __init__(self, text: bytes, value: dict[str, Any] | None = None) -> None:
        self.text = text
        self._value = value
        self._lock = threading.Lock()

    @classmethod
    def of(cls, value: dict[str, Any]) -> Document:
        """The Document of a value at hand."""
        return cls(json.dumps(value, separators=(",", ":")).encode(), value)

    @property
    def value(self) -> dict[str, Any]:
        """The object, parsed from the text on first use (shared: do not change it)."""
        if self._value is None:
            with self._lock:
                if self._value is None:
                    self._value = json.loads(self.text)
        return self._value
