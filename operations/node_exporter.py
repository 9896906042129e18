"""node_exporter: the distribution's Prometheus node exporter on every host, listening where group
data says, with its textfile collector folder holding llmfleet's own host metrics (chrony's offset,
the models folder's free space), written by llmfleet-host-metrics.timer (install, configure,
activate). What it renders: llmfleet/node_exporter.py."""

from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files, systemd

from llmfleet import node_exporter
from llmfleet.settings import Settings
from operations import apt_installed

UNIT_DIR = "/etc/systemd/system"


@deploy("node_exporter")
def configure(settings: Settings):
    """The node exporter installed, enabled and running with group data's address and textfile
    folder; llmfleet's host metrics written into that folder every node_exporter_metrics_interval_s."""
    # install
    apt_installed("node exporter is installed", [node_exporter.NODE_EXPORTER_PACKAGE], settings.apt_cache_valid_s,
                  no_recommends=True)
    # configure
    files.directory(name="textfile collector folder", path=settings.node_exporter_textfile_dir, mode="755")
    defaults = files.put(name="node exporter listens and reads the textfile folder where group data says",
                         src=StringIO(node_exporter.node_exporter_defaults(settings)),
                         dest=node_exporter.NODE_EXPORTER_DEFAULTS, mode="644")
    files.directory(name="llmfleet's host scripts folder", path="/usr/local/lib/llmfleet", mode="755")
    files.put(name="host metrics script", src=StringIO(node_exporter.host_metrics_script(settings)),
              dest=node_exporter.HOST_METRICS_SCRIPT, mode="755")
    units = [files.put(name=f"{name}", src=StringIO(content), dest=f"{UNIT_DIR}/{name}", mode="644")
             for name, content in node_exporter.host_metrics_units(settings).items()]
    # activate
    systemd.service(name="node exporter is enabled and running", service=node_exporter.NODE_EXPORTER_SERVICE,
                    running=True, enabled=True, restarted=defaults.will_change)
    changed = any(u.will_change for u in units)
    systemd.service(name="host metrics timer is enabled and running",
                    service=f"{node_exporter.HOST_METRICS_UNIT}.timer", running=True, enabled=True, restarted=changed,
                    daemon_reload=changed)
