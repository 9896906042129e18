"""The nvidia_driver component's decisions that are plain functions: packages per distribution and
flavour, the repository folder, and when the driver needs a reboot. (Its operations are tested
facts-in, commands-out in operations/.)"""

import pytest
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pyinfra.api import OperationValueError

from llmfleet.schema import AppClocks
from llmfleet.templates import TEMPLATES
from operations.gpu_clocks import UNIT
from operations.nvidia_driver import driver_packages, moves, reboot_reasons, repo_distro


class S:
    """The two settings reboot_reasons reads."""

    def __init__(self, version="580.95.05", flavour="proprietary"):
        self.nvidia_driver_version, self.nvidia_driver_flavour = version, flavour


def test_ubuntu_proprietary_packages_carry_the_branch_and_ubuntu_version():
    assert driver_packages("ubuntu", "proprietary", "580.95.05") == {
        "libnvidia-compute-580": "580.95.05-0ubuntu1", "nvidia-dkms-580": "580.95.05-0ubuntu1",
        "nvidia-utils-580": "580.95.05-0ubuntu1", "nvidia-compute-utils-580": "580.95.05-0ubuntu1"}


def test_debian_open_packages():
    assert driver_packages("debian", "open", "580.95.05") == {
        "nvidia-driver-cuda": "580.95.05-1", "nvidia-kernel-open-dkms": "580.95.05-1",
        "nvidia-persistenced": "580.95.05-1"}


@pytest.mark.parametrize("os_id,version,folder", [("ubuntu", "20.04", "ubuntu2004"), ("ubuntu", "22.04", "ubuntu2204"),
                                                  ("ubuntu", "24.04", "ubuntu2404"), ("debian", "12", "debian12")])
def test_repository_folder(os_id, version, folder):
    assert repo_distro({"os": os_id, "os_version": version}, "gpu-1") == folder


def test_unsupported_distribution_is_refused_with_the_supported_list():
    with pytest.raises(OperationValueError, match=r"host gpu-1: nvidia_driver: ubuntu 18.04 is not a distribution "
                                                  r".*supported: ubuntu 20.04, ubuntu 22.04, ubuntu 24.04, debian 12"):
        repo_distro({"os": "ubuntu", "os_version": "18.04"}, "gpu-1")


@pytest.mark.parametrize("module,changing,expected", [
    ({"version": "580.95.05", "flavour": "proprietary"}, False, []),
    ({"version": "580.95.05", "flavour": "proprietary"}, True,
     ["NVIDIA driver 580.95.05 (proprietary) installed: its kernel module loads at boot"]),
    (None, False, ["the NVIDIA kernel module is not loaded"]),
    ({"version": "580.82.07", "flavour": "proprietary"}, False,
     ["NVIDIA kernel module 580.82.07 is loaded, 580.95.05 is installed"]),
    ({"version": "580.95.05", "flavour": "open"}, False,
     ["the open NVIDIA kernel module is loaded, proprietary is installed"]),
])
def test_reboot_reasons(module, changing, expected):
    assert reboot_reasons(S(), {"module": module}, changing) == expected


def test_clocks_unit_applies_memory_first_after_persistenced():
    env = Environment(loader=FileSystemLoader(str(TEMPLATES / "gpu_clocks")), undefined=StrictUndefined)
    clocks = AppClocks(memory=877, graphics=1530)
    text = env.get_template(UNIT + ".j2").render(memory=clocks.memory, graphics=clocks.graphics)
    assert "ExecStart=/usr/bin/nvidia-smi -ac 877,1530\n" in text
    assert "After=nvidia-persistenced.service\n" in text and "Requires=nvidia-persistenced.service\n" in text
    assert "WantedBy=multi-user.target" in text


def test_fabric_manager_alone_moving_is_no_driver_change_and_so_no_reboot():
    """Fabric Manager held at another version moves in the driver's transaction, but the driver's own
    packages decide the initramfs, DKMS and the reboot: none of them for Fabric Manager alone."""
    driver = driver_packages("ubuntu", "open", "580.95.05")
    fm = {"nvidia-fabricmanager": "580.95.05-1", "libnvidia-nscq": "580.95.05-1"}
    on_host = driver | {"nvidia-fabricmanager": "580.65.06-1", "libnvidia-nscq": "580.65.06-1"}
    assert moves(on_host, driver | fm) and not moves(on_host, driver)
    assert moves(driver_packages("ubuntu", "open", "580.82.07") | fm, driver)
