"""Which of a Backup's or a Restore's Velero hooks apply to a VM (its namespace, as globs; its
kind among the hook's resources; its labels), as the commands its guest agent runs."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from diskferry.control.reconcilers.velero.selection import VM, kind_taken
from diskferry.control.resources.backup import Backup
from diskferry.control.resources.duration import parse_duration
from diskferry.control.resources.hooks import HOOK_TIMEOUT, HookErrorMode, HookScope
from diskferry.control.resources.restore import Restore


def hook_applies(scope: HookScope, namespace: str, labels: dict[str, str]) -> bool:
    """Whether a hook applies to the VM in `namespace` with `labels`: its namespaces (globs),
    its resources (VirtualMachine in any of its names, or empty) and its label selector."""
    if any(fnmatchcase(namespace, glob) for glob in scope.excluded_namespaces or []):
        return False
    included = [glob for glob in scope.included_namespaces or [] if glob != "*"]
    if included and not any(fnmatchcase(namespace, glob) for glob in included):
        return False
    if not kind_taken(VM, scope.included_resources or [], scope.excluded_resources or []):
        return False
    return scope.label_selector is None or scope.label_selector.matches(labels)


def _seconds(duration: str | None) -> float:
    return parse_duration(duration or HOOK_TIMEOUT).total_seconds()


def backup_hooks(backup: Backup, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The commands of the Backup's hooks that apply to the VM in `namespace` with `labels`,
    as a DataUpload's `diskferry.io/hooks` lists them: pre ones, then post ones, each in its
    spec's order (onError Fail and a 30 s timeout by default, as Velero's)."""
    hooks = backup.spec.hooks
    specs = (hooks.resources or []) if hooks is not None else []
    applying = [s for s in specs if hook_applies(s, namespace, labels)]
    out = []
    for phase in ("pre", "post"):
        for spec in applying:
            for hook in getattr(spec, phase) or []:
                run = hook.exec
                out.append(
                    {
                        "name": spec.name,
                        "phase": phase,
                        "command": run.command,
                        "onError": (run.on_error or HookErrorMode.FAIL).value,
                        "timeout": _seconds(run.timeout),
                    }
                )
    return out


def restore_hooks(restore: Restore, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The exec hooks of the Restore that apply to the VM restored into `namespace` with
    `labels`, in order: name, command, onError (Continue by default, as Velero's), and the
    timeouts in seconds (no waitTimeout: waits as long as it takes)."""
    hooks = restore.spec.hooks
    specs = (hooks.resources or []) if hooks is not None else []
    out = []
    for spec in specs:
        if not hook_applies(spec, namespace, labels):
            continue
        for hook in spec.post_hooks or []:
            run = hook.exec
            if run is None:
                continue
            wait = None if run.wait_timeout is None else parse_duration(run.wait_timeout)
            out.append(
                {
                    "name": spec.name,
                    "command": run.command,
                    "onError": (run.on_error or HookErrorMode.CONTINUE).value,
                    "execTimeout": _seconds(run.exec_timeout),
                    "waitTimeout": None if wait is None else wait.total_seconds(),
                }
            )
    return out
