"""What `inventories/lab.py` and `group_data/lab.py` read: the running lab's hosts and services."""

from __future__ import annotations

from llmfleet.lab.config import LabPaths
from llmfleet.lab.lifecycle import load
from llmfleet.lab.state import LabState


def lab_groups() -> dict[str, list[tuple[str, dict]]]:
    """pyinfra groups of the running lab: `lab_containers` and `lab_vms` (the serving hosts' kinds) and
    `lab_gateways` (the fleet gateway's containers), with SSH data per host."""
    state = load()
    paths = LabPaths.from_env()
    groups: dict[str, list[tuple[str, dict]]] = {"lab_containers": [], "lab_vms": [], "lab_gateways": []}
    for h in sorted(state.hosts.values(), key=lambda h: h.name):
        data = {
            "ssh_hostname": h.address,
            "ssh_port": h.ssh_port,
            "ssh_user": state.user,
            "ssh_key": str(paths.client_key),
            "ssh_known_hosts_file": str(paths.known_hosts),
            "ssh_strict_host_key_checking": "yes",
            "lab_kind": h.kind,
        }
        group = "lab_gateways" if h.role == "gateway" else "lab_containers" if h.kind == "container" else "lab_vms"
        groups[group].append((h.name, data))
    return groups


def service_url(name: str) -> str | None:
    """URL of a lab service on the machine, or None when no lab is up (group_data/lab.py is read
    for every inventory, so it must not fail when the lab is down)."""
    state = LabState.load(LabPaths.from_env())
    if state is None or name not in state.services:
        return None
    svc = state.services[name]
    return f"http://{svc.address}:{svc.port}" + ("/" if name == "wheels" else "")


def gateway() -> str | None:
    state = LabState.load(LabPaths.from_env())
    return state.gateway if state else None


def service_address(name: str) -> str | None:
    """"address:port" of a lab service on the machine, or None when no lab is up."""
    state = LabState.load(LabPaths.from_env())
    if state is None or name not in state.services:
        return None
    svc = state.services[name]
    return f"{svc.address}:{svc.port}"
