"""A Restore's exec hooks in its restored VMs' guests, as Velero runs them in restored Pods:
the hooks whose namespaces, resources and labels take a VM wait (up to their waitTimeout) for
it to run with an answering guest agent once its disks are back, then run in order through
the agent (guest-exec), each within its execTimeout. A hook that fails with onError Fail
stops every hook still to run, of every VM (the Restore is then PartiallyFailed); one that
fails with Continue is reported. A VM whose runPolicy does not start it runs none."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from diskferry.backup.hooks import run_hook
from diskferry.backup.job import HookCommand
from diskferry.control.clock import rfc3339
from diskferry.control.machines import Machines
from diskferry.control.reconcilers.hookspecs import restore_hooks
from diskferry.control.reconcilers.quiesce import agent_silence
from diskferry.control.reconcilers.virtualmachine import sockets_of
from diskferry.control.resources.hooks import HookErrorMode
from diskferry.control.resources.restore import Restore
from diskferry.control.resources.virtualmachine import MachinePhase, RunPolicy, VirtualMachine
from diskferry.control.runtime.client import Client

STARTED = (RunPolicy.ALWAYS_ON, RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY)
WAITING = "Waiting"
DONE = "Done"


def stopped(machines: list[dict[str, Any]]) -> bool:
    """Whether a hook with onError Fail failed, which stops every hook still to run."""
    return any(
        run["failed"] and run["onError"] == HookErrorMode.FAIL.value
        for machine in machines
        for run in machine.get("hookRuns") or []
    )


class RestoreHooks:
    """Runs the hooks of the machines a Restore gave back."""

    def __init__(self, client: Client, machines: Machines) -> None:
        self.client = client
        self.machines = machines

    def begin(self, restore: Restore, machine: dict[str, Any], now: datetime) -> None:
        """Mark the hooks of a VM just given back as waiting, or say why none runs."""
        vm = self.client.get(VirtualMachine, machine["namespace"], machine["name"])
        if vm is None or not restore_hooks(restore, machine["namespace"], vm.metadata.labels):
            return
        if vm.spec.run_policy not in STARTED:
            machine["hooks"] = DONE
            message = (
                f"VirtualMachine {machine['namespace']}/{machine['name']} has runPolicy "
                f"{vm.spec.run_policy.value}: it is not started, and its hooks do not run"
            )
            self.client.event(restore, "Warning", "HooksNotRun", message)
            return
        machine["hooks"], machine["hooksSince"] = WAITING, rfc3339(now)

    def step(
        self, restore: Restore, machine: dict[str, Any], every: list[dict[str, Any]], now: datetime
    ) -> None:
        """Run the VM's hooks once it runs with an answering agent; fail those whose
        waitTimeout passed; run none once a hook with onError Fail failed anywhere."""
        vm = self.client.get(VirtualMachine, machine["namespace"], machine["name"])
        hooks = (
            [] if vm is None else restore_hooks(restore, machine["namespace"], vm.metadata.labels)
        )
        if vm is None or stopped(every):
            machine["hooks"] = DONE
            return
        agent = sockets_of(self.machines, vm).agent
        ready = vm.status.phase == MachinePhase.RUNNING and agent_silence(agent) is None
        if not ready:
            since = datetime.fromisoformat(machine["hooksSince"])
            waited = (now - since).total_seconds()
            late = [h for h in hooks if h["waitTimeout"] is not None and waited > h["waitTimeout"]]
            if late:
                machine["hookRuns"] = [
                    self._outcome(
                        h,
                        None,
                        f"the VM did not run with an answering guest agent "
                        f"within {h['waitTimeout']:g} s",
                    )
                    for h in hooks
                ]
                machine["hooks"] = DONE
            return
        runs = []
        for hook in hooks:
            runs.append(self._run(restore, machine, hook, agent or ""))
            if runs[-1]["failed"] and hook["onError"] == HookErrorMode.FAIL.value:
                break
        machine["hookRuns"], machine["hooks"] = runs, DONE

    def _run(
        self, restore: Restore, machine: dict[str, Any], hook: dict[str, Any], agent: str
    ) -> dict[str, Any]:
        command = HookCommand(
            name=hook["name"],
            phase="post",
            command=hook["command"],
            onError=hook["onError"],
            timeout=hook["execTimeout"],
        )
        ran = run_hook(agent, command)
        outcome = self._outcome(hook, ran.exit_code, ran.message, not ran.failed)
        where = f"{machine['namespace']}/{machine['name']}"
        message = f"hook {hook['name']} in VirtualMachine {where}: {outcome['message']}"
        if outcome["failed"]:
            self.client.event(restore, "Warning", "HookFailed", message)
        else:
            self.client.event(restore, "Normal", "HookRan", message)
        return outcome

    @staticmethod
    def _outcome(
        hook: dict[str, Any], exit_code: int | None, message: str, ok: bool = False
    ) -> dict[str, Any]:
        outcome = {"name": hook["name"], "onError": hook["onError"], "failed": not ok}
        if exit_code is not None:
            outcome["exitCode"] = exit_code
        return {**outcome, "message": message}
