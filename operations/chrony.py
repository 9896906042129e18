"""chrony: time is synchronised with the servers group data names (install, configure, activate)."""

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import systemd

from llmfleet.facts import IsContainer
from llmfleet.settings import Settings
from operations import apt_installed, managed_files

CONF = "/etc/chrony/chrony.conf"
CONTAINER_DROPIN = "/etc/systemd/system/chrony.service.d/90-llmfleet-container.conf"


@deploy("chrony")
def configure(settings: Settings):
    """Install chrony, point it at `chrony_servers`, and keep it enabled and running."""
    # install
    apt_installed("chrony is installed", ["chrony"], settings.apt_cache_valid_s, no_recommends=True)
    # configure
    conf = managed_files.template("chrony uses the configured servers", "chrony", "chrony.conf.j2", CONF,
                                  servers=list(settings.chrony_servers))
    container = host.get_fact(IsContainer)
    if container:
        host.noop("chrony: on a container host the clock belongs to the machine: chronyd runs with -x "
                  "(measures and reports the offset, does not set the clock)")
    if container:
        managed_files.directory("chrony unit drop-in folder", CONTAINER_DROPIN.rpartition("/")[0])
        dropin = managed_files.template("chrony runs without clock control on a container host", "chrony",
                                        "90-llmfleet-container.conf.j2", CONTAINER_DROPIN)
    else:
        dropin = None
        managed_files.absent("no chrony unit drop-in folder (a host with a clock of its own)",
                             CONTAINER_DROPIN.rpartition("/")[0], directory=True)
    # activate: systemd reads a changed drop-in, and one restart when anything changed
    dropin_changed = dropin is not None and dropin.will_change
    systemd.service(name="chrony is enabled and running", service="chrony", running=True, enabled=True,
                    restarted=conf.will_change or dropin_changed, daemon_reload=dropin_changed)
