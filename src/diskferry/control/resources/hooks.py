"""Velero's backup and restore hooks: commands run in a VirtualMachine's guest through its QEMU
guest agent (guest-exec) where Velero runs them in a Pod's container."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from diskferry.control.resources.common import Duration
from diskferry.control.resources.labelselector import LabelSelector
from diskferry.control.resources.model import ApiModel
from diskferry.control.resources.noeffect import no_effect
from diskferry.control.resources.selection import RESOURCES, Names

HOOK_TIMEOUT = "30s"
"""How long a hook's command may run when its spec does not say (Velero's default)."""
CONTAINER_WHY = "a VirtualMachine has no containers: the command runs in its guest"


class HookErrorMode(StrEnum):
    """What a hook that fails does to the backup or restore."""

    CONTINUE = "Continue"
    FAIL = "Fail"


class ExecHook(ApiModel):
    """A command run in the guest of each VM the hook applies to, through its guest agent."""

    container: str | None = no_effect(
        CONTAINER_WHY, "The container to run the command in.", default=None
    )
    command: list[str] = Field(
        min_length=1,
        description="The program (a path in the guest) and its arguments, run by the guest "
        "agent's guest-exec; it fails when it exits non-zero.",
    )
    on_error: HookErrorMode | None = Field(
        default=None,
        alias="onError",
        description="Fail (the default for a backup's hooks): a failed command fails the VM's "
        "backup; Continue: it is counted and reported, and the backup goes on.",
    )
    timeout: Duration | None = Field(
        default=None,
        description=f"How long the command may run (default {HOOK_TIMEOUT}); a command still "
        "running then has failed.",
    )


class BackupResourceHook(ApiModel):
    """One hook: only `exec` is known."""

    exec: ExecHook = Field(description="The command to run.")


class HookScope(ApiModel):
    """Which VirtualMachines a hook applies to."""

    name: str = Field(min_length=1, description="The hook's name, for Events and status.")
    included_namespaces: Names | None = Field(
        default=None,
        alias="includedNamespaces",
        description="Namespaces of the VMs it applies to, as globs; empty or `*`: all.",
    )
    excluded_namespaces: Names | None = Field(
        default=None,
        alias="excludedNamespaces",
        description="Namespaces it does not apply to, as globs.",
    )
    included_resources: Names | None = Field(
        default=None,
        alias="includedResources",
        description="Resources it applies to: empty, `*` or VirtualMachine in any of its names "
        "applies it to VMs; any other (Velero's `pods`) to nothing here." + RESOURCES,
    )
    excluded_resources: Names | None = Field(
        default=None,
        alias="excludedResources",
        description="Resources it does not apply to." + RESOURCES,
    )
    label_selector: LabelSelector | None = Field(
        default=None,
        alias="labelSelector",
        description="The VMs it applies to must match it.",
    )


class BackupResourceHookSpec(HookScope):
    """Commands run in the guests of some of the backup's VMs, before and after their backup."""

    pre: list[BackupResourceHook] | None = Field(
        default=None,
        description="Run in order before the VM's backup point is taken (before its filesystems "
        "are frozen); one that fails with onError Fail fails the VM's backup.",
    )
    post: list[BackupResourceHook] | None = Field(
        default=None,
        description="Run in order once the VM's backup ended (thawed, its data moved).",
    )


class BackupHooks(ApiModel):
    """The hooks of a backup."""

    resources: list[BackupResourceHookSpec] | None = Field(
        default=None, description="Hook specs, each for the VMs it selects."
    )


class RestoreExecHook(ApiModel):
    """A command run in the guest of a restored VM once it runs and its agent answers."""

    container: str | None = no_effect(
        CONTAINER_WHY, "The container to run the command in.", default=None
    )
    command: list[str] = Field(
        min_length=1,
        description="The program (a path in the guest) and its arguments, run by the guest "
        "agent's guest-exec; it fails when it exits non-zero.",
    )
    on_error: HookErrorMode | None = Field(
        default=None,
        alias="onError",
        description="Continue (the default for a restore's hooks): a failed command is counted "
        "and reported; Fail: no more hooks run and the Restore is PartiallyFailed.",
    )
    exec_timeout: Duration | None = Field(
        default=None,
        alias="execTimeout",
        description=f"How long the command may run (default {HOOK_TIMEOUT}).",
    )
    wait_timeout: Duration | None = Field(
        default=None,
        alias="waitTimeout",
        description="How long to wait, from the VM's restore, for it to run with an answering "
        "guest agent (default: as long as it takes).",
    )
    wait_for_ready: bool | None = Field(
        default=None,
        alias="waitForReady",
        description="Velero waits for the container to be Ready rather than Running; here the "
        "guest agent answering is what is waited for either way.",
    )


class InitRestoreHook(ApiModel):
    """Init containers Velero adds to a restored Pod."""

    init_containers: list[dict[str, Any]] | None = no_effect(
        "a VirtualMachine has no init containers",
        "Containers (core/v1 Container) added as init containers.",
        default=None,
        alias="initContainers",
    )
    timeout: Duration | None = no_effect(
        "there are no init containers to wait for",
        "How long to wait for the init containers.",
        default=None,
    )


class RestoreResourceHook(ApiModel):
    """One hook: `exec` (run in the guest), or `init` (no effect here)."""

    exec: RestoreExecHook | None = Field(default=None, description="The command to run.")
    init: InitRestoreHook | None = no_effect(
        "a VirtualMachine has no init containers", "Init containers to add.", default=None
    )


class RestoreResourceHookSpec(HookScope):
    """Commands run in the guests of some of the restored VMs."""

    post_hooks: list[RestoreResourceHook] | None = Field(
        default=None,
        alias="postHooks",
        description="Run in order in each restored VM it applies to, once the VM runs with its "
        "disks restored and its guest agent answers.",
    )


class RestoreHooks(ApiModel):
    """The hooks of a restore."""

    resources: list[RestoreResourceHookSpec] | None = Field(
        default=None, description="Hook specs, each for the VMs it selects."
    )


class HookStatus(ApiModel):
    """How many hooks ran, and failed."""

    hooks_attempted: int | None = Field(
        default=None, alias="hooksAttempted", description="Hook commands run."
    )
    hooks_failed: int | None = Field(
        default=None, alias="hooksFailed", description="Of them, those that failed."
    )
