"""nvidia_persistence: the GPUs stay initialised between jobs, through NVIDIA's nvidia-persistenced
daemon (NVIDIA recommends it over the legacy `nvidia-smi -pm 1`).

Some packagings start the daemon with --no-persistence-mode; a drop-in makes it enable
persistence mode, and the daemon is enabled and running (restarted once when the drop-in changes).
"""

from pyinfra.api import deploy
from pyinfra.operations import systemd

from llmfleet.settings import Settings
from operations import managed_files
from operations.nvidia_driver import skipped

UNIT = "nvidia-persistenced.service"
DROPIN_DIR = f"/etc/systemd/system/{UNIT}.d"


@deploy("nvidia_persistence")
def configure(settings: Settings):
    """nvidia-persistenced runs with persistence mode on, at every boot."""
    if skipped(settings, "nvidia_persistence"):
        return
    managed_files.directory("persistenced drop-in folder", DROPIN_DIR)
    dropin = managed_files.template("persistenced enables persistence mode", "nvidia_persistence",
                                    "90-llmfleet.conf.j2", f"{DROPIN_DIR}/90-llmfleet.conf")
    systemd.service(name="nvidia-persistenced enabled and running", service=UNIT, running=True, enabled=True,
                    restarted=dropin.will_change, daemon_reload=dropin.will_change)
