"""Runners: where the control plane starts engine workers and reads how they are doing."""

from diskferry.control.runtime.runner.base import JobState, Runner

__all__ = ["JobState", "Runner"]
