"""nvidia_persistence: the GPUs stay initialised between jobs, through NVIDIA's nvidia-persistenced
daemon (NVIDIA recommends it over the legacy `nvidia-smi -pm 1`).

Some packagings start the daemon with --no-persistence-mode; a drop-in makes it enable
persistence mode, and the daemon is enabled and running (restarted once when the drop-in changes).
"""

from pyinfra.api import deploy
from pyinfra.operations import files, systemd

from llmfleet import templates
from llmfleet.settings import Settings
from operations.nvidia_driver import skipped

UNIT = "nvidia-persistenced.service"
DROPIN_DIR = f"/etc/systemd/system/{UNIT}.d"


@deploy("nvidia_persistence")
def configure(settings: Settings):
    """nvidia-persistenced runs with persistence mode on, at every boot."""
    if skipped(settings, "nvidia_persistence"):
        return
    files.directory(name="persistenced drop-in folder", path=DROPIN_DIR)
    dropin = files.template(name="persistenced enables persistence mode",
                            src=templates.path("nvidia_persistence", "90-llmfleet.conf.j2"),
                            dest=f"{DROPIN_DIR}/90-llmfleet.conf", mode="644")
    systemd.service(name="nvidia-persistenced enabled and running", service=UNIT, running=True, enabled=True,
                    restarted=dropin.will_change, daemon_reload=dropin.will_change)
