"""Commands run in a VM's guest around its backup point (Velero's pre and post hooks), through
its guest agent: each one's outcome, and HookFailedError at the first that fails with
onError Fail (no later hook of the phase runs)."""

from __future__ import annotations

from collections.abc import Sequence

from diskferry.backup.job import (
    HOOK_FAILED,
    FailedHook,
    GuestHooksJob,
    HookCommand,
    HookOutcome,
    HooksResult,
)
from diskferry.base.errors import DiskferryError
from diskferry.qemu.guestexec import guest_exec
from diskferry.qemu.qmp import QmpError
from diskferry.worker.reporter import EventType, Reporter


class HookFailedError(DiskferryError):
    """A hook with onError Fail failed: the backup stops."""

    reason = HOOK_FAILED


def run_hook(agent: str, hook: HookCommand) -> HookOutcome:
    """Run one hook's command through the agent at `agent`: how it ended (a command the
    agent refuses or cannot reach has failed)."""
    try:
        ran = guest_exec(agent, hook.command, hook.timeout)
    except QmpError as e:
        return HookOutcome(name=hook.name, phase=hook.phase, failed=True, message=e.message)
    if ran.timed_out:
        message = f"still running after {hook.timeout:g} s"
    else:
        said = (ran.err or ran.out).strip().splitlines()
        message = f"exited {ran.exit_code}" + (f": {said[-1]}" if said else "")
    return HookOutcome(
        name=hook.name,
        phase=hook.phase,
        exitCode=ran.exit_code,
        failed=not ran.ok,
        message=message,
    )


def run_hooks(
    agent: str, hooks: Sequence[HookCommand], phase: str, reporter: Reporter
) -> list[HookOutcome]:
    """Run the hooks of `phase` in order through the agent at `agent`; their outcomes."""
    outcomes = []
    for hook in (h for h in hooks if h.phase == phase):
        outcome = run_hook(agent, hook)
        outcomes.append(outcome)
        said = f"hook {hook.name} ({phase}) {'failed' if outcome.failed else 'ran'}: "
        kind = EventType.WARNING if outcome.failed else EventType.NORMAL
        reporter.event(kind, "HookFailed" if outcome.failed else "HookRan", said + outcome.message)
        if outcome.failed and hook.on_error == "Fail":
            stopped = FailedHook(name=hook.name, phase=hook.phase)
            raise HookFailedError(stopped.says(outcome.message))
    return outcomes


def run_guest_hooks(job: GuestHooksJob) -> HooksResult:
    """Run the job's hooks in order through its agent, none after one that failed with onError
    Fail; how each that ran ended."""
    outcomes = []
    for hook in job.hooks:
        outcomes.append(run_hook(job.agent, hook))
        if outcomes[-1].failed and hook.on_error == "Fail":
            break
    return HooksResult(hooks=outcomes)
