"""NVIDIA Fabric Manager as data: its packages at the driver's version, whether a host needs it, and
what its state means. No I/O: the operation (operations/fabric_manager.py, and the driver's apt
transaction in operations/nvidia_driver.py) and the verify test (verify/test_fabric_manager.py) read
the host and decide with these.

On an NVSwitch board (HGX A100, HGX H100/H800/H200, DGX-2) CUDA does not start until Fabric Manager
has configured the NVSwitches and registered the GPUs: every CUDA program, vLLM's workers included,
fails with error 802, "system not yet initialized". Fabric Manager runs only at exactly the loaded
driver's version. Sources: docs/gpu-generations-sources.md section 3 (the Fabric Manager user guide,
docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/; error 802: dstackai/dstack#2348; the version
rule: the READMEs of NVIDIA/apt-packaging-fabric-manager and NVIDIA/apt-packaging-libnvidia-nscq).
"""

from __future__ import annotations

import re

from llmfleet.schema import GpuProfile

SERVICE = "nvidia-fabricmanager.service"
# From branch 580 NVIDIA's CUDA repository names the packages without the branch (nvidia-fabricmanager,
# libnvidia-nscq); before, nvidia-fabricmanager-<branch> and libnvidia-nscq-<branch>. Their Debian
# version is <driver version>-1 on Ubuntu and (unverified) Debian alike (NVIDIA/gpu-driver-container's
# fabricmanager_install / nscq_install). Another branch's package is replaced, not kept beside
# (Provides/Replaces/Conflicts: nvidia-fabricmanager in NVIDIA's packaging).
UNBRANCHED_FROM = 580
NAMES = ("nvidia-fabricmanager", "libnvidia-nscq")
DEB_VERSION = "{version}-1"
_FAMILY = re.compile(r"^(nvidia-fabricmanager|libnvidia-nscq)(-[0-9]+)?$")
# CUDA's answer when Fabric Manager has not registered the GPUs (cuda.h: CUDA_ERROR_SYSTEM_NOT_READY)
CUDA_ERROR_SYSTEM_NOT_READY = 802
# NVML's GPU fabric states (nvml.h / pynvml: NVML_GPU_FABRIC_STATE_*)
FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}


def packages(driver_version: str) -> dict[str, str]:
    """{package: exact Debian version} of Fabric Manager and NSCQ for a driver version."""
    branch = int(driver_version.split(".", 1)[0])
    suffix = "" if branch >= UNBRANCHED_FROM else f"-{branch}"
    return {f"{name}{suffix}": DEB_VERSION.format(version=driver_version) for name in NAMES}


def replaced(installed: dict[str, str], wanted: dict[str, str]) -> list[str]:
    """The installed Fabric Manager / NSCQ packages of another name (another branch's) that the wanted
    ones replace: removed in the same apt transaction."""
    return sorted(name for name in installed if _FAMILY.match(name) and name not in wanted)


def host_problems(host_name: str, profile_name: str, nvswitches: int, found: int) -> list[str]:
    """The profile's NVSwitch count against those on the host's PCI bus (`found`): a board with
    NVSwitches under a profile without them would get no Fabric Manager (and CUDA error 802); a profile
    with them on a host without any would install and wait for a fabric that is not there."""
    if found and not nvswitches:
        return [f"host {host_name}: fabric_manager: {found} NVSwitch(es) on the PCI bus (vendor 0x10de, class 0x0680) "
                f"but gpu_profile {profile_name!r} says nvswitches = 0: CUDA would not start without Fabric Manager "
                "(error 802) (fix: the profile of this board, e.g. one of the HGX profiles, or nvswitches = "
                f"{found} in a profile of its own)"]
    if nvswitches and not found:
        return [f"host {host_name}: fabric_manager: gpu_profile {profile_name!r} expects {nvswitches} NVSwitches, "
                "the PCI bus has none (a VM with the GPUs passed through but not the NVSwitches, or another board) "
                "(fix: a profile with nvswitches = 0 for this host, e.g. h200_141gb_x1 for one HGX GPU in a VM)"]
    return []


def version_problems(installed: dict[str, str], wanted: dict[str, str], loaded: str | None) -> list[str]:
    """Each Fabric Manager / NSCQ package that is not the wanted version, or not the loaded driver's
    (Fabric Manager then refuses to start: "fabric manager NVIDIA GPU driver interface version X don't
    match with driver version Y")."""
    problems = []
    for name, version in sorted(wanted.items()):
        have = installed.get(name)
        if have != version:
            problems.append(f"{name}: expected {version} (nvidia_driver_version), actual {have or 'not installed'}")
        elif loaded is not None and have.split("-", 1)[0] != loaded:
            problems.append(f"{name} {have.split('-', 1)[0]} against the loaded driver {loaded}: expected the same "
                            "version (Fabric Manager does not start with another; reboot into the installed driver)")
    return problems


def describe_fabric(info: dict) -> str:
    """A GPU's NVML fabric information as a person reads it: "completed, success", "not supported",
    "in progress", "completed, status 19" (NVML's return code, when not success), or the error."""
    if "error" in info:
        return "not supported" if "Not Supported" in str(info["error"]) else f"unreadable ({info['error']})"
    state = FABRIC_STATES.get(info.get("state", -1), f"state {info.get('state')}")
    if state != "completed":
        return state
    status = info.get("status")
    return "completed, success" if status == 0 else f"completed, status {status}"


def expected_fabric(profile: GpuProfile) -> str | None:
    """What describe_fabric must say on every GPU of a healthy host of this profile (None: not recorded)."""
    return {"completed": "completed, success", "not_supported": "not supported", None: None}[profile.gpu_fabric]
