"""fabric_manager: on an NVSwitch board, Fabric Manager runs at exactly the loaded driver's version
and every GPU's fabric registration is complete; on any host, the NVSwitches are what the profile
says and CUDA initialises (error 802 is what a missing Fabric Manager looks like). Each failure
names host, setting, expected and actual."""

import pytest

from llmfleet import fabric_manager as fm
from verify.helpers import expect, expect_each, run_remote


@pytest.fixture(scope="module")
def fm_state(host) -> dict:
    """NVSwitches, Fabric Manager's packages and service, the loaded driver and cuInit, in one round trip
    (llmfleet/remote/fabric_manager_state.py, the host's python3). Read-only."""
    return run_remote(host, "fabric_manager_state")


def _no_fabric_manager(settings) -> str:
    return (f"gpu_profile {settings.gpu_profile}: nvswitches 0, no NVSwitch on this board: no Fabric Manager to run "
            "(test_nvswitches_on_the_pci_bus proves the host has none)")


def test_nvswitches_on_the_pci_bus(host_name, settings, gpu_profile, fm_state):
    """The NVSwitches the profile says (a board that lost one, or an HGX host under a PCIe profile, shows here)."""
    found = {"on the PCI bus (vendor 0x10de, class 0x0680)": len(fm_state["pci_nvswitches"])}
    if fm_state["registered_nvswitches"] is not None:  # the driver's nvidia-nvswitch module is loaded
        registered = fm_state["registered_nvswitches"]
        found["registered by the driver (/proc/driver/nvidia-nvswitch/devices)"] = len(registered)
    expect(host_name, f"NVSwitches (gpu_profiles.{settings.gpu_profile}.nvswitches)",
           {where: gpu_profile.nvswitches for where in found}, found)


def test_fabric_manager_service_enabled_and_running(host_name, settings, gpu_profile, fm_state):
    if not gpu_profile.fabric_manager:
        pytest.skip(_no_fabric_manager(settings))
    expect(host_name, f"{fm.SERVICE} (fabric_manager)", {"active": "active", "enabled": "enabled"}, fm_state["service"])


def test_fabric_manager_packages_are_the_loaded_driver(host_name, settings, gpu_profile, fm_state):
    """Fabric Manager and NSCQ at nvidia_driver_version, held, and that version is the loaded driver's:
    Fabric Manager refuses to start with another."""
    if not gpu_profile.fabric_manager:
        pytest.skip(_no_fabric_manager(settings))
    wanted = fm.packages(settings.nvidia_driver_version)
    have = fm_state["packages"]
    problems = fm.version_problems({n: p["version"] for n, p in have.items()}, wanted, fm_state["driver"])
    problems += [f"{name}: expected held (apt-mark hold), actual not held" for name in sorted(wanted)
                 if name in have and not have[name]["held"]]
    problems += [f"{name}: expected removed (another branch's package beside {', '.join(sorted(wanted))}), actual "
                 f"{have[name]['version']}" for name in fm.replaced({n: p["version"] for n, p in have.items()}, wanted)]
    assert not problems, "\n".join(f"{host_name}: fabric_manager: {p}" for p in problems)


def test_every_gpu_fabric_state(host_name, settings, gpu_profile, gpu_state):
    """NVML's GPU fabric information (Hopper and newer): "completed, success" on every GPU of an NVSwitch
    board; "not supported" where the profile says the GPU reports none (pre-Hopper, no NVSwitch, one GPU
    passed through to a VM)."""
    seen = {g["index"]: fm.describe_fabric(g.get("fabric", {"error": "not read"})) for g in gpu_state["nvml"]["gpus"]}
    expected = fm.expected_fabric(gpu_profile)
    if expected is None:
        pytest.skip(f"gpu_profiles.{settings.gpu_profile}.gpu_fabric is None (not recorded for this machine); read: "
                    + ", ".join(f"GPU {i} {s}" for i, s in sorted(seen.items())))
    expect_each(host_name, f"GPU fabric state, NVML (gpu_profiles.{settings.gpu_profile}.gpu_fabric)", expected, seen)


def test_cuda_initialises(host_name, settings, gpu_profile, fm_state):
    """cuInit(0) = 0. On an NVSwitch board without a working Fabric Manager it is 802
    (CUDA_ERROR_SYSTEM_NOT_READY) while nvidia-smi still lists every GPU."""
    init = fm_state["cuda_init"]
    if "error" in init:
        actual = init["error"]
    elif init["rc"] == fm.CUDA_ERROR_SYSTEM_NOT_READY:
        actual = (f"{init['rc']} ({init.get('name', 'CUDA_ERROR_SYSTEM_NOT_READY')}: system not yet initialized; "
                  f"Fabric Manager is not running, or not at the loaded driver {fm_state['driver']}; "
                  f"{len(fm_state['pci_nvswitches'])} NVSwitches on PCI)")
    else:
        actual = f"{init['rc']} ({init.get('name', 'CUDA_SUCCESS' if init['rc'] == 0 else 'error')})"
    expect(host_name, "CUDA initialisation (cuInit)", "0 (CUDA_SUCCESS)", actual)
