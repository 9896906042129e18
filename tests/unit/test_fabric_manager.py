"""Fabric Manager as data (llmfleet/fabric_manager.py): its packages at the driver's version (named by
branch before R580), the other branch's packages it replaces, the profile against the host's NVSwitches,
the version rule and what NVML's fabric state reads as. (Its operations: tests/ops/operations/.)"""

import pytest

from llmfleet import fabric_manager as fm


@pytest.mark.parametrize("version,expected", [
    ("580.95.05", {"nvidia-fabricmanager": "580.95.05-1", "libnvidia-nscq": "580.95.05-1"}),
    ("590.44.01", {"nvidia-fabricmanager": "590.44.01-1", "libnvidia-nscq": "590.44.01-1"}),
    ("570.195.03", {"nvidia-fabricmanager-570": "570.195.03-1", "libnvidia-nscq-570": "570.195.03-1"}),
    ("535.261.03", {"nvidia-fabricmanager-535": "535.261.03-1", "libnvidia-nscq-535": "535.261.03-1"}),
])
def test_packages_follow_the_driver_version_and_the_rename_at_r580(version, expected):
    assert fm.packages(version) == expected


def test_another_branchs_packages_are_replaced_and_nothing_else():
    installed = {"nvidia-fabricmanager-570": "570.195.03-1", "libnvidia-nscq-570": "570.195.03-1",
                 "nvidia-fabricmanager-dev-570": "570.195.03-1", "nvidia-dkms-580": "580.95.05-0ubuntu1",
                 "nvidia-fabricmanager": "580.95.05-1"}
    assert fm.replaced(installed, fm.packages("580.95.05")) == ["libnvidia-nscq-570", "nvidia-fabricmanager-570"]


@pytest.mark.parametrize("nvswitches,found,expected", [
    (4, 4, []), (0, 0, []), (6, 6, []),
    (0, 6, "host gpu-3: fabric_manager: 6 NVSwitch(es) on the PCI bus (vendor 0x10de, class 0x0680) but gpu_profile "
           "'p' says nvswitches = 0: CUDA would not start without Fabric Manager (error 802)"),
    (4, 0, "host gpu-3: fabric_manager: gpu_profile 'p' expects 4 NVSwitches, the PCI bus has none"),
])
def test_the_profile_against_the_nvswitches_on_the_bus(nvswitches, found, expected):
    problems = fm.host_problems("gpu-3", "p", nvswitches, found)
    assert (problems == []) if expected == [] else expected in problems[0]


def test_a_version_mismatch_names_both_versions():
    wanted = fm.packages("580.95.05")
    assert fm.version_problems({n: v for n, v in wanted.items()}, wanted, "580.95.05") == []
    assert fm.version_problems({"nvidia-fabricmanager": "580.105.08-1", "libnvidia-nscq": "580.95.05-1"}, wanted,
                               "580.95.05") == [
        "nvidia-fabricmanager: expected 580.95.05-1 (nvidia_driver_version), actual 580.105.08-1"]
    assert fm.version_problems(wanted, wanted, "580.82.07") == [
        "libnvidia-nscq 580.95.05 against the loaded driver 580.82.07: expected the same version (Fabric Manager does "
        "not start with another; reboot into the installed driver)",
        "nvidia-fabricmanager 580.95.05 against the loaded driver 580.82.07: expected the same version (Fabric Manager "
        "does not start with another; reboot into the installed driver)"]
    assert fm.version_problems({}, wanted, None) == [
        "libnvidia-nscq: expected 580.95.05-1 (nvidia_driver_version), actual not installed",
        "nvidia-fabricmanager: expected 580.95.05-1 (nvidia_driver_version), actual not installed"]


@pytest.mark.parametrize("info,expected", [
    ({"state": 3, "status": 0}, "completed, success"),
    ({"state": 3, "status": 19}, "completed, status 19"),
    ({"state": 2, "status": 0}, "in progress"),
    ({"state": 1, "status": 0}, "not started"),
    ({"state": 0, "status": 0}, "not supported"),
    ({"error": "Not Supported"}, "not supported"),
    ({"error": "Unknown Error"}, "unreadable (Unknown Error)"),
])
def test_nvml_fabric_state_as_a_person_reads_it(info, expected):
    assert fm.describe_fabric(info) == expected
