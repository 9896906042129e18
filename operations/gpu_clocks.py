"""gpu_clocks: every GPU runs the configured application clocks, now and after every boot.

A oneshot unit ordered after nvidia-persistenced applies them at boot (`nvidia-smi -ac
MEMORY,GRAPHICS`: memory first). The pair was checked against the profile's supported clocks
before the deploy started; here it is checked again against the pairs the host's GPU reports.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import OperationError, StringCommand, deploy, operation
from pyinfra.operations import systemd

from llmfleet.facts import NvidiaHost
from llmfleet.gpu_guardrails import app_clocks
from llmfleet.settings import Settings
from operations import managed_files
from operations.nvidia_driver import say, skipped

UNIT = "llmfleet-gpu-clocks.service"


@operation()
def applied(memory: int, graphics: int, force: bool = False):
    """
    Every GPU's application clocks are (memory, graphics); applied through the boot unit.

    + memory: memory clock in MHz
    + graphics: graphics clock in MHz
    + force: apply even if the GPUs already report the pair (the unit changed)
    """
    facts = host.get_fact(NvidiaHost)
    if not facts["smi"]:
        host.noop(f"gpu_clocks: {memory},{graphics} applied at the next boot (nvidia-smi does not answer yet: "
                  "the driver is not loaded)")
        return
    supported = {tuple(pair) for pair in facts["supported_clocks"]}
    if supported and (memory, graphics) not in supported:
        mems = sorted({m for m, _ in supported})
        near = sorted((g for m, g in supported if m == memory), key=lambda g: abs(g - graphics))[:3]
        raise OperationError(
            f"gpu_clocks: {memory},{graphics} (memory,graphics) is not a pair this host's GPU supports "
            f"(memory clocks: {mems}; nearest graphics clocks at {memory} MHz: {near or 'none'}); "
            "fix gpu_app_clocks or the profile's app_clocks (see nvidia-smi -q -d SUPPORTED_CLOCKS)")
    off = [g for g in facts["smi"] if (g["app_memory"], g["app_graphics"]) != (memory, graphics)]
    if not off and not force:
        host.noop(f"gpu_clocks: all {len(facts['smi'])} GPUs at {memory},{graphics} (memory,graphics)")
        return
    yield StringCommand(f"systemctl restart {UNIT}")


@deploy("gpu_clocks")
def configure(settings: Settings):
    """Install and enable the boot unit; apply the clocks now where a GPU differs."""
    if skipped(settings, "gpu_clocks"):
        return
    clocks = app_clocks(settings)
    if clocks is None:  # skipped() returned already where there is no profile
        say(f"gpu_clocks: skipped: the GPUs of profile {settings.gpu_profile} have no application clocks "
            "(app_clocks None: GeForce boards refuse nvidia-smi -ac)")
        return
    unit = managed_files.template("boot unit applies the application clocks", "gpu_clocks", UNIT + ".j2",
                                  f"/etc/systemd/system/{UNIT}", memory=clocks.memory, graphics=clocks.graphics)
    systemd.service(name="clocks unit enabled at boot", service=UNIT, enabled=True, running=None,
                    daemon_reload=unit.will_change)
    applied(name=f"application clocks {clocks.memory},{clocks.graphics} (memory,graphics)",
            memory=clocks.memory, graphics=clocks.graphics, force=unit.will_change)
