"""cpu_governor: every CPU runs the frequency governor group data names, where cpufreq exists."""

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import systemd

from llmfleet.facts import SysfsValues
from llmfleet.settings import Settings
from operations import managed_files

CPU0 = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
UNIT = "llmfleet-cpu-governor.service"


@deploy("cpu_governor")
def configure(settings: Settings):
    """Set `cpu_governor` on every CPU now and at every boot; say so where the host has no cpufreq."""
    if settings.cpu_governor is None:
        host.noop("cpu_governor: left alone (cpu_governor = None)")
        return
    if host.get_fact(SysfsValues, paths=[CPU0])[CPU0]["value"] is None:
        host.noop(f"cpu_governor: not applied: this host exposes no cpufreq ({CPU0} is missing; "
                  "VMs and containers usually have none)")
        return
    unit = managed_files.template("boot unit sets the CPU governor", "cpu_governor", UNIT + ".j2",
                                  f"/etc/systemd/system/{UNIT}", governor=settings.cpu_governor)
    systemd.service(name="governor unit enabled and run", service=UNIT, enabled=True, running=True,
                    restarted=unit.will_change, daemon_reload=unit.will_change)
