"""Serving layouts: the vLLM instances of a host (group data `vllm_layout`), checked and derived
without a host.

A layout is a list of instances, each on its own GPUs and port; the shorthand "NxM" derives N
instances of M GPUs from the host's GPU profile: groups whose every pair is NVLink-connected in
the profile's `nvlink_pairs` (on a profile that has NVLink) and whose GPUs sit on one NUMA node
of `gpu_numa_nodes`. `problems(settings)` is every reason a layout cannot be served, each as
`setting = value: why (fix: ...)`, run with the other cross-checks before any host is touched
(llmfleet/settings.py). `binding` turns an instance and the host's NUMA nodes (read at deploy,
fact `NumaNodes`) into the CPUs and memory nodes of its unit.

Pure functions: the deploy, verify, the probe, monitoring and `llmfleet layout` use the same ones.
"""

from __future__ import annotations

import itertools
import string
from typing import TYPE_CHECKING

from llmfleet import frontdoor
from llmfleet.schema import VllmInstance
from llmfleet.vllm import UNIT_NAME, Binding

if TYPE_CHECKING:
    from llmfleet.schema import GpuProfile, Settings

# vLLM options the layout sets per instance: given in vllm_flags too, they would contradict it
LAYOUT_FLAGS = ("tensor-parallel-size", "pipeline-parallel-size")


class LayoutError(ValueError):
    """A layout that cannot be derived; the message is `setting = value: why (fix: ...)`."""


def _bad(setting: str, value: object, why: str, fix: str) -> str:
    return f"{setting} = {value!r}: {why} (fix: {fix})"


def parse_cpulist(text: str) -> list[int]:
    """The kernel's CPU list syntax ("0-3,8,10-11", as /sys/devices/system/node/node0/cpulist)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return sorted(set(cpus))


def format_cpulist(cpus) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8"."""
    out, items = [], sorted(set(cpus))
    for _, run in itertools.groupby(enumerate(items), lambda pair: pair[1] - pair[0]):
        values = [v for _, v in run]
        out.append(str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}")
    return ",".join(out)


def nvlinked(profile: GpuProfile, group) -> bool:
    """Whether every pair of the group is NVLink-connected in the profile (always, on a profile
    without NVLink pairs: its GPUs talk over PCIe anyway, and nothing better is there)."""
    if not profile.nvlink_pairs:
        return True
    pairs = {frozenset(int(x) for x in key.split("-")) for key in profile.nvlink_pairs}
    return all(frozenset(pair) in pairs for pair in itertools.combinations(group, 2))


def numa_nodes_of(profile: GpuProfile | None, gpus) -> list[int]:
    """The NUMA nodes of these GPUs by the profile ([] where the profile does not say)."""
    if profile is None or profile.gpu_numa_nodes is None:
        return []
    return sorted({profile.gpu_numa_nodes[g] for g in gpus if g < len(profile.gpu_numa_nodes)})


def fitting_groups(profile: GpuProfile, size: int, numa_span: bool = False) -> list[tuple[int, ...]]:
    """Every group of `size` GPUs a layout may use: NVLink-connected, and on one NUMA node unless
    `numa_span`; in index order."""
    return [group for group in itertools.combinations(range(profile.count), size)
            if nvlinked(profile, group) and (numa_span or len(numa_nodes_of(profile, group)) <= 1)]


def derive(shorthand: str, profile: GpuProfile | None, first_port: int, numa_span: bool = False,
           setting: str = "vllm_layout") -> list[VllmInstance]:
    """The instances of "NxM": N disjoint groups of M GPUs (fitting_groups), the first partition
    in index order; named a, b, c, ... on ports first_port, first_port + 1, ..."""
    n, m = (int(x) for x in shorthand.split("x"))
    if profile is None:
        raise LayoutError(_bad(setting, shorthand, "a shorthand derives instances from the GPU profile, and this "
                                                    "host has none (gpu_profile = None)",
                               "list the instances, with 'cpus' for a host without GPUs"))
    if n * m > profile.count:
        raise LayoutError(_bad(setting, shorthand, f"{n} x {m} = {n * m} GPUs, more than the {profile.count} of "
                                                    f"{profile.model_name}", f"at most {profile.count} GPUs in all"))
    if n > len(string.ascii_lowercase):
        raise LayoutError(_bad(setting, shorthand, f"{n} instances: the shorthand names them a to z",
                               "list the instances"))
    groups = fitting_groups(profile, m, numa_span)
    found = _partition(groups, n)
    if found is None:
        where = ("NVLink-connected" if profile.nvlink_pairs else "") + \
                (" and on one NUMA node" if profile.gpu_numa_nodes and not numa_span else "")
        spanning = not numa_span and _partition(fitting_groups(profile, m, True), n) is not None
        raise LayoutError(_bad(setting, shorthand,
                               f"there are no {n} disjoint groups of {m} GPUs {where.strip() or 'on this profile'} "
                               f"(the groups of {m} that are: {_list_groups(groups)})",
                               "a smaller shorthand, or list the instances" +
                               (", or vllm_layout_numa_span = True to let groups span NUMA nodes" if spanning
                                else "")))
    return [VllmInstance(name=string.ascii_lowercase[i], gpus=list(group), port=first_port + i)
            for i, group in enumerate(found)]


def _partition(groups: list[tuple[int, ...]], n: int) -> list[tuple[int, ...]] | None:
    """The first n disjoint groups, in index order (backtracking: a greedy pick can block the rest)."""
    def pick(chosen: list[tuple[int, ...]], start: int) -> list[tuple[int, ...]] | None:
        if len(chosen) == n:
            return chosen
        used = {g for group in chosen for g in group}
        for i in range(start, len(groups)):
            if not used & set(groups[i]):
                found = pick([*chosen, groups[i]], i + 1)
                if found:
                    return found
        return None

    return pick([], 0)


def _list_groups(groups, limit: int = 12) -> str:
    if not groups:
        return "none"
    shown = ", ".join("[" + ",".join(str(g) for g in group) + "]" for group in groups[:limit])
    return shown + (f" and {len(groups) - limit} more" if len(groups) > limit else "")


def instances(settings: Settings) -> list[VllmInstance] | None:
    """The host's instances; None without a layout (one vllm.service on all GPUs). Raises
    LayoutError for a shorthand that cannot be derived (problems() reports it with the rest)."""
    layout = settings.vllm_layout
    if layout is None:
        return None
    if isinstance(layout, str):
        return derive(layout, settings.profile, settings.vllm_layout_first_port, settings.vllm_layout_numa_span)
    return list(layout)


def service_ports(settings: Settings) -> dict[str, int]:
    """Every port the host's services listen on, by what listens: vllm_port (the front door with a
    layout, else the one server), each instance, the front door's metrics, the gateway agent,
    host_service_ports.
    A shorthand that cannot be derived contributes no instance ports (problems() says why)."""
    ports = {"vllm_port": settings.vllm_port}
    try:
        layout = instances(settings)
    except LayoutError:
        layout = []
    if layout is not None:
        ports |= {f"vllm_layout instance {i.name}": i.port for i in layout}
        ports["frontdoor_metrics_port"] = settings.frontdoor_metrics_port
    ports["gateway_agent_port"] = settings.gateway_agent_port  # the fleet gateway's agent (llmfleet/gateway.py)
    ports |= {f"host_service_ports.{name}": port for name, port in settings.host_service_ports.items()}
    return ports


def port_problems(settings: Settings) -> list[str]:
    """Two services of the host on one port."""
    by_port: dict[int, list[str]] = {}
    for what, port in service_ports(settings).items():
        by_port.setdefault(port, []).append(what)
    return [f"port {port} is taken twice on the host: by {' and by '.join(whats)} (fix: give each its own port)"
            for port, whats in sorted(by_port.items()) if len(whats) > 1]


def problems(settings: Settings) -> list[str]:
    """Every reason the host's layout cannot be served, each naming the setting, the value and
    the fix; [] for a host without a layout (its ports are still checked)."""
    if not settings.vllm_enabled:
        return []
    out = port_problems(settings)
    try:
        layout = instances(settings)
    except LayoutError as exc:
        return [str(exc), *out]
    if layout is None:
        return out
    for flag in LAYOUT_FLAGS:
        value = settings.vllm_flags.get(flag)  # spelt with dashes (the schema's flag_name)
        if value is not None:
            out.append(_bad(f"vllm_flags.{flag}", value, "the layout sets it for each instance from its GPUs",
                            f"leave it out of vllm_flags ('{flag}': None) and size the instances in vllm_layout"))
    profile = settings.profile
    names = [i.name for i in layout]
    for name in sorted({n for n in names if names.count(n) > 1}):
        out.append(_bad("vllm_layout", name, "two instances have this name", "give each instance its own name"))
    owner: dict[int, str] = {}
    heads = settings.vllm_model.num_attention_heads if settings.vllm_model else None
    for index, inst in enumerate(layout):
        where = f"vllm_layout[{index}] ({inst.name}).gpus"
        if profile is None:
            if inst.gpus:
                out.append(_bad(where, inst.gpus, "this host has no GPU profile (gpu_profile = None)",
                                "gpus: [] on a host without GPUs, or set gpu_profile"))
            continue
        if not inst.gpus:
            out.append(_bad(where, inst.gpus, f"an instance on a {profile.model_name} host needs GPUs",
                            f"some of GPUs 0-{profile.count - 1}"))
            continue
        beyond = [g for g in inst.gpus if g >= profile.count]
        if beyond:
            out.append(_bad(where, inst.gpus, f"GPU {beyond} beyond the {profile.count} GPUs of profile "
                                              f"{settings.gpu_profile} (indexes 0-{profile.count - 1})",
                            f"GPUs 0-{profile.count - 1}"))
            continue
        if len(set(inst.gpus)) != len(inst.gpus):
            out.append(_bad(where, inst.gpus, "names a GPU twice", "each GPU once"))
            continue
        for g in inst.gpus:
            if g in owner:
                out.append(_bad(where, inst.gpus, f"GPU {g} is instance {owner[g]}'s too",
                                "each GPU in one instance only"))
            owner.setdefault(g, inst.name)
        size, pp = len(inst.gpus), inst.pipeline_parallel_size
        if size % pp:
            out.append(_bad(f"vllm_layout[{index}] ({inst.name}).pipeline_parallel_size", pp,
                            f"does not divide its {size} GPUs", f"a divisor of {size}"))
            continue
        tp = size // pp
        if heads is not None and heads % tp:
            fits = [n for n in range(1, profile.count + 1) if heads % n == 0]
            out.append(_bad(where, inst.gpus, f"tensor-parallel size {tp} ({size} GPUs / {pp} pipeline stages) "
                                              f"does not divide the model's {heads} attention heads "
                                              "(vllm_model.num_attention_heads)",
                            f"a tensor-parallel size in {fits}"))
        if size > 1 and not nvlinked(profile, inst.gpus):
            out.append(_bad(where, inst.gpus, f"not every pair of these GPUs is NVLink-connected on "
                                              f"{settings.gpu_profile} (its nvlink_pairs); tensor parallelism "
                                              "would run its all-reduce over PCIe",
                            f"a group that is: {_list_groups(fitting_groups(profile, size, True))}"))
        nodes = numa_nodes_of(profile, inst.gpus)
        if len(nodes) > 1 and not settings.vllm_layout_numa_span:
            out.append(_bad(where, inst.gpus, f"spans NUMA nodes {nodes} (gpu_numa_nodes of {settings.gpu_profile})",
                            f"GPUs of one node: {_list_groups(fitting_groups(profile, size))}, or "
                            "vllm_layout_numa_span = True to serve it across nodes"))
    return out


def binding(inst: VllmInstance, profile: GpuProfile | None, node_cpus: dict[int, str]) -> Binding | None:
    """An instance's CPUs and memory nodes on a host whose NUMA nodes have these CPU lists
    (/sys/devices/system/node/node<N>/cpulist, fact NumaNodes): its own `cpus` and their nodes,
    else the nodes of its GPUs (profile's gpu_numa_nodes) and all their CPUs. None where neither
    is known (a profile without gpu_numa_nodes): the unit is then not bound."""
    if inst.cpus is not None:
        wanted = set(parse_cpulist(inst.cpus))
        nodes = [n for n, cpus in sorted(node_cpus.items()) if wanted & set(parse_cpulist(cpus))]
        return Binding(cpus=format_cpulist(wanted), nodes=format_cpulist(nodes))
    nodes = numa_nodes_of(profile, inst.gpus)
    if not nodes or any(n not in node_cpus for n in nodes):
        return None
    cpus = [c for n in nodes for c in parse_cpulist(node_cpus[n])]
    return Binding(cpus=format_cpulist(cpus), nodes=format_cpulist(nodes))


def binding_problems(host_name: str, layout: list[VllmInstance], node_cpus: dict[int, str]) -> list[str]:
    """What the host's NUMA nodes cannot give the layout (read at deploy): CPUs it does not have."""
    have = {c for cpus in node_cpus.values() for c in parse_cpulist(cpus)}
    out = []
    for index, inst in enumerate(layout):
        if inst.cpus is not None:
            missing = sorted(set(parse_cpulist(inst.cpus)) - have)
            if missing:
                out.append(_bad(f"vllm_layout[{index}] ({inst.name}).cpus", inst.cpus,
                                f"CPUs {format_cpulist(missing)} are not on {host_name} (its NUMA nodes hold "
                                f"{format_cpulist(have) or 'none'})", "CPUs the host has"))
    return out


def port_owners(settings: Settings) -> dict[int, tuple[str, set[str]]]:
    """Each port the deploy is to listen on, with the setting that names it and the units that
    may hold it: an instance's own unit (its server, restarted by the roll); on vllm_port the
    front door, or vllm.service, which a move to a layout stops first; without a layout
    vllm.service. host_service_ports are other services' own, and no concern of the deploy's."""
    layout = instances(settings)
    if layout is None:
        return {settings.vllm_port: ("vllm_port", {UNIT_NAME})}
    owners = {i.port: (f"the port of vllm_layout instance {i.name}", {i.unit_name}) for i in layout}
    owners[settings.vllm_port] = ("vllm_port", {frontdoor.SERVICE, UNIT_NAME})
    owners[settings.frontdoor_metrics_port] = ("frontdoor_metrics_port", {frontdoor.SERVICE})
    return owners


def held_port_problems(settings: Settings, holders: dict) -> list[str]:
    """The ports the deploy is to listen on that another process holds on the host (checked before
    anything is launched: a port taken before the start fails the start, after the roll
    has changed the host). `holders` is the PortHolders fact: {"<port>": [{"pid", "command", "unit"}]}."""
    problems = []
    for port, (setting, units) in sorted(port_owners(settings).items()):
        others = [h for h in holders.get(str(port), []) if h.get("unit") not in units]
        if others:
            who = ", ".join(f"{h.get('command') or '?'} (pid {h['pid']}, unit {h.get('unit') or 'none'})"
                            for h in others)
            problems.append(f"{setting} = {port} is held on the host by {who}, not by {' or '.join(sorted(units))}: "
                            f"the server could not listen on it (fix: stop or move that process, or set {setting} "
                            "to a free port)")
    return problems
