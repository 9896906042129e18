"""node_exporter: the distribution's Prometheus node exporter on every host, listening where group
data says, with its textfile collector folder holding llmfleet's own host metrics (chrony's offset,
the models folder's free space), written by llmfleet-host-metrics.timer (install, configure,
activate). What it renders: llmfleet/node_exporter.py."""


from pyinfra.api import deploy
from pyinfra.operations import systemd

from llmfleet import node_exporter
from llmfleet.settings import Settings
from operations import apt_installed, managed_files

UNIT_DIR = "/etc/systemd/system"


@deploy("node_exporter")
def configure(settings: Settings):
    """The node exporter installed, enabled and running with group data's address and textfile
    folder; llmfleet's host metrics written into that folder every node_exporter_metrics_interval_s."""
    # install
    apt_installed("node exporter is installed", [node_exporter.NODE_EXPORTER_PACKAGE], settings.apt_cache_valid_s,
                  no_recommends=True)
    # configure
    managed_files.directory("textfile collector folder", settings.node_exporter_textfile_dir)
    defaults = managed_files.put("node exporter listens and reads the textfile folder where group data says",
                                 node_exporter.NODE_EXPORTER_DEFAULTS, node_exporter.node_exporter_defaults(settings))
    managed_files.directory("llmfleet's host scripts folder", "/usr/local/lib/llmfleet")
    managed_files.put("host metrics script", node_exporter.HOST_METRICS_SCRIPT,
                      node_exporter.host_metrics_script(settings), mode="755")
    units = [managed_files.put(name, f"{UNIT_DIR}/{name}", content)
             for name, content in node_exporter.host_metrics_units(settings).items()]
    # activate
    systemd.service(name="node exporter is enabled and running", service=node_exporter.NODE_EXPORTER_SERVICE,
                    running=True, enabled=True, restarted=defaults.will_change)
    changed = any(u.will_change for u in units)
    systemd.service(name="host metrics timer is enabled and running",
                    service=f"{node_exporter.HOST_METRICS_UNIT}.timer", running=True, enabled=True, restarted=changed,
                    daemon_reload=changed)
