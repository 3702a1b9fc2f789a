"""The operator tests take the control tests' helpers (daemon_support, control_support)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "control"))
