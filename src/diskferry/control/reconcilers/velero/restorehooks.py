"""A Restore's exec hooks in its restored VMs' guests, as Velero runs them in restored Pods:
the hooks whose namespaces, resources and labels take a VM wait (up to their waitTimeout) for
it to run with an answering guest agent once its disks are back, then run in order through
the agent (guest-exec), each within its execTimeout, in a worker's hooks job (one VM's at a
time). A hook that fails with onError Fail stops every hook still to run, of every VM (the
Restore is then PartiallyFailed); one that fails with Continue is reported. A VM whose
runPolicy does not start it runs none."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from diskferry.backup import GuestHooksJob, HookCommand, HookOutcome, HooksResult
from diskferry.control.clock import rfc3339
from diskferry.control.host.machines import Machines
from diskferry.control.reconcilers.velero.hookspecs import restore_hooks
from diskferry.control.reconcilers.vms.quiesce import agent_silence
from diskferry.control.resources.hooks import HookErrorMode
from diskferry.control.resources.restore import Restore
from diskferry.control.resources.virtualmachine import MachinePhase, RunPolicy, VirtualMachine
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.runner.base import Runner
from diskferry.control.runtime.runner.jobs import Failed, Jobs, Running, Succeeded

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

    def __init__(self, client: Client, runner: Runner, machines: Machines) -> None:
        self.client = client
        self.jobs = Jobs(runner)
        self.machines = machines

    @staticmethod
    def job_id(restore: Restore, machine: dict[str, Any]) -> str:
        """The id of the hooks job of the restored VM `machine`."""
        return f"rh-{restore.metadata.uid}-{machine['namespace']}-{machine['name']}"

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
        """Start the VM's hooks job once it runs with an answering agent and no other VM's
        hooks run, and take its outcomes once it ended; fail those whose waitTimeout passed;
        run none once a hook with onError Fail failed anywhere."""
        vm = self.client.get(VirtualMachine, machine["namespace"], machine["name"])
        hooks = (
            [] if vm is None else restore_hooks(restore, machine["namespace"], vm.metadata.labels)
        )
        if vm is None or not hooks or stopped(every):
            machine["hooks"] = DONE
            return
        job_id = self.job_id(restore, machine)
        polled = self.jobs.poll(job_id, HooksResult)
        if isinstance(polled, Running):
            return
        if polled is not None:
            self._ended(restore, machine, hooks, polled)
            return
        agent = self.machines.sockets(vm).agent
        silence = agent_silence(self.machines, vm)
        ready = vm.status.phase == MachinePhase.RUNNING and silence is None
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
        if any(
            isinstance(self.jobs.poll(self.job_id(restore, other), HooksResult), Running)
            for other in every
            if other is not machine
        ):
            return  # one VM's hooks at a time: one that fails with onError Fail stops the rest
        commands = [
            HookCommand(
                name=hook["name"],
                phase="post",
                command=hook["command"],
                onError=hook["onError"],
                timeout=hook["execTimeout"],
            )
            for hook in hooks
        ]
        self.jobs.start(job_id, GuestHooksJob(agent=agent or "", hooks=commands))

    def _ended(
        self,
        restore: Restore,
        machine: dict[str, Any],
        hooks: list[dict[str, Any]],
        polled: Failed | Succeeded[HooksResult],
    ) -> None:
        """The outcomes of the VM's hooks job, each an Event; every hook failed when the job
        did."""
        if isinstance(polled, Failed):
            said = f"the worker that runs the hooks failed: {polled.message}"
            outcomes = [
                HookOutcome(name=h["name"], phase="post", failed=True, message=said) for h in hooks
            ]
        else:
            outcomes = polled.result.hooks
        ran = zip(hooks, outcomes, strict=False)  # none after one that failed with Fail
        machine["hookRuns"] = [self._run(restore, machine, hook, outcome) for hook, outcome in ran]
        machine["hooks"] = DONE
        tag = f"Restore {restore.metadata.namespace}/{restore.metadata.name}"
        self.jobs.settle(self.job_id(restore, machine), tag, keep=isinstance(polled, Failed))

    def _run(
        self,
        restore: Restore,
        machine: dict[str, Any],
        hook: dict[str, Any],
        ran: HookOutcome,
    ) -> dict[str, Any]:
        """The hook's run as the Restore's status lists it, and its Event."""
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
