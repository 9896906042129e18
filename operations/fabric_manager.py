"""fabric_manager: on an NVSwitch board (HGX A100, HGX H100/H800/H200), NVIDIA Fabric Manager runs
at exactly the driver's version, enabled and running before vLLM starts (the vLLM units order after
it); on any other host, nothing, said in the output.

Its packages (nvidia-fabricmanager and libnvidia-nscq, or their -<branch> names before R580) are
installed, pinned and held by the driver's own apt transaction (operations/nvidia_driver.py): a
driver change moves them with it, never one without the other. Here: the service. While the host
waits for a reboot into a new driver, Fabric Manager cannot start (it refuses a loaded module of
another version): it is enabled, and starts at that boot. The pure decisions: llmfleet/fabric_manager.py.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import OperationValueError, deploy, operation
from pyinfra.operations import systemd

from llmfleet import fabric_manager as fm
from llmfleet.facts import NvidiaHost
from llmfleet.settings import Settings
from operations.nvidia_driver import say, skipped


@operation()
def service(profile_name: str, nvswitches: int, driver_version: str, reboot_reasons: list[str]):
    """
    Fabric Manager enabled and running where the profile has NVSwitches; nothing elsewhere.

    + profile_name: the host's gpu_profile
    + nvswitches: the profile's NVSwitch count (0: no Fabric Manager)
    + driver_version: nvidia_driver_version (the packages are at it)
    + reboot_reasons: why the host reboots for the driver (non-empty: started at that boot, not now)
    """
    facts = host.get_fact(NvidiaHost)
    problems = fm.host_problems(host.name, profile_name, nvswitches, len(facts["pci_nvswitches"]))
    if problems:
        raise OperationValueError("; ".join(problems))
    if not nvswitches:
        host.noop(f"fabric_manager: no NVSwitch on this host (profile {profile_name}: nvswitches 0, none on the PCI "
                  "bus): no Fabric Manager to run")
        return
    if reboot_reasons:  # enabled now, started by the boot into the new driver (the deploy says so)
        yield from systemd.service._inner(service=fm.SERVICE, running=None, enabled=True)
        return
    # a new Fabric Manager package (the driver unchanged: it was held at another version) is restarted
    wanted = fm.packages(driver_version)
    changed = any(facts["packages"].get(name) != version for name, version in wanted.items())
    yield from systemd.service._inner(service=fm.SERVICE, running=True, enabled=True, restarted=changed)


@deploy("fabric_manager")
def configure(settings: Settings, driver_reboot: list[str]):
    """The Fabric Manager service after the driver's transaction (see the module's docstring)."""
    if skipped(settings, "fabric_manager"):
        return
    profile = settings.profile
    assert profile is not None and settings.gpu_profile is not None  # skipped() is True otherwise
    if not profile.fabric_manager:
        say(f"fabric_manager: skipped: profile {settings.gpu_profile} has no NVSwitch (nvswitches 0): Fabric Manager "
            "is for NVSwitch boards only")
    elif driver_reboot:
        say(f"fabric_manager: enabled, starts at the reboot ({'; '.join(driver_reboot)}): it runs only with the "
            f"loaded driver at {settings.nvidia_driver_version}")
    service(name=f"Fabric Manager ({fm.SERVICE}) at driver {settings.nvidia_driver_version}",
            profile_name=settings.gpu_profile, nvswitches=profile.nvswitches,
            driver_version=settings.nvidia_driver_version, reboot_reasons=driver_reboot)
