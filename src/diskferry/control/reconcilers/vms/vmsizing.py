"""Whether a VM fits the sizing policy of its class, said as Deckhouse's controller says it (each
problem names the field to change), and the core fraction the VM gets."""

from __future__ import annotations

from diskferry.control.resources.quantity import format_bytes, parse_quantity
from diskferry.control.resources.virtualmachine import VirtualMachine
from diskferry.control.resources.virtualmachineclass import SizingPolicy, VirtualMachineClass

FULL = 100
HINT = "check the sizing policy of the VirtualMachineClass or contact the administrator"


def core_fraction(vm: VirtualMachine, vm_class: VirtualMachineClass | None) -> int:
    """The percent of each core the VM gets: its own, else its class's policy's default, else
    100 (Auto, the autoscaler's, is taken as unset here)."""
    given = vm.spec.cpu.core_fraction
    if given is not None and given != "Auto":
        return int(given.removesuffix("%"))
    policy = None if vm_class is None else vm_class.spec.policy_for(vm.spec.cpu.cores)
    default = None if policy is None else policy.default_core_fraction
    return default if isinstance(default, int) else FULL


def sizing_problem(vm: VirtualMachine, vm_class: VirtualMachineClass | None) -> str | None:
    """Why the VM does not match its class's sizing policies, None when it does (or when the
    class has none)."""
    if vm_class is None or not vm_class.spec.sizing_policies:
        return None
    name, cores = vm_class.metadata.name, vm.spec.cpu.cores
    policy = vm_class.spec.policy_for(cores)
    if policy is None:
        ranges = ", ".join(f"{p.cores.min}-{p.cores.max}" for p in vm_class.spec.sizing_policies)
        return (
            f'The VirtualMachine does not match any sizing policy of VirtualMachineClass "{name}": '
            f"its {cores} CPU core(s) fall outside the allowed ranges ({ranges}); set the number "
            "of cores (spec.cpu.cores) accordingly."
        )
    found = [
        *_fraction(vm, vm_class, policy),
        *_cores(cores, policy),
        *_memory(policy, cores, vm.spec.memory.size_bytes),
    ]
    if not found:
        return None
    return (
        f'The VirtualMachine does not match the sizing policy of VirtualMachineClass "{name}": '
        f"{'; '.join(found)}: {HINT}."
    )


def _fraction(vm: VirtualMachine, vm_class: VirtualMachineClass, policy: SizingPolicy) -> list[str]:
    percent = core_fraction(vm, vm_class)
    if policy.fraction_allowed(percent):
        return []
    allowed = ", ".join(f"{f}%" for f in policy.core_fractions or [])
    return [
        f'the CPU core fraction "{percent}%" is not allowed; set the core fraction '
        f"(spec.cpu.coreFraction) to one of: {allowed}"
    ]


def _cores(cores: int, policy: SizingPolicy) -> list[str]:
    grid = policy.cores.grid()
    if cores in grid:
        return []
    lower = max(c for c in grid if c < cores)
    upper = min(c for c in grid if c > cores)
    return [
        f"the number of CPU cores ({cores}) does not match the sizing policy step; set the "
        f"number of cores (spec.cpu.cores) to {lower} or {upper}"
    ]


def _memory(policy: SizingPolicy, cores: int, size: int) -> list[str]:
    memory = policy.memory
    if memory is None:
        return []
    low = parse_quantity(memory.min) if memory.min else None
    high = parse_quantity(memory.max) if memory.max else None
    found = []
    if (low is not None and size < low) or (high is not None and size > high):
        found.append(
            f"the memory size ({format_bytes(size)}) is out of the range allowed by the sizing "
            f"policy; set the memory size (spec.memory.size) {_between(low, high)}"
        )
    elif high is not None and memory.step:
        step, base = parse_quantity(memory.step), low or 0
        if step and (size - base) % step:
            below = base + (size - base) // step * step
            found.append(
                f"the memory size ({format_bytes(size)}) does not match the sizing policy step; "
                f"set the memory size (spec.memory.size) to {format_bytes(below)} or "
                f"{format_bytes(min(below + step, high))}"
            )
    each = memory.per_core
    if each is not None and (each.min or each.max):
        least = parse_quantity(each.min) if each.min else None
        most = parse_quantity(each.max) if each.max else None
        per_core = size // cores
        if (least is not None and per_core < least) or (most is not None and per_core > most):
            total_low = None if least is None else least * cores
            total_high = None if most is None else most * cores
            found.append(
                f"the memory size ({format_bytes(size)}) is not allowed for {cores} CPU core(s); "
                f"set the memory size (spec.memory.size) {_between(total_low, total_high)}, or "
                "change the number of cores (spec.cpu.cores)"
            )
    return found


def _between(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"between {format_bytes(low)} and {format_bytes(high)}"
    if low is not None:
        return f"to at least {format_bytes(low)}"
    return f"to at most {format_bytes(high or 0)}"
