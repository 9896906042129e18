"""node_exporter as data: the distribution's node exporter's arguments and llmfleet's host metrics
(script, service and timer). Pure functions of the settings: the deploy (operations/node_exporter.py)
writes what they render, verify (verify/test_node_exporter.py) compares the host with the same rendering."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmfleet import templates
from llmfleet.addresses import listen

if TYPE_CHECKING:
    from llmfleet.schema import Settings

# node_exporter: Debian's package, its unit and the file its unit reads ARGS from
# (/lib/systemd/system/prometheus-node-exporter.service: EnvironmentFile=/etc/default/prometheus-node-exporter)
NODE_EXPORTER_PACKAGE = "prometheus-node-exporter"
NODE_EXPORTER_SERVICE = "prometheus-node-exporter.service"
NODE_EXPORTER_DEFAULTS = "/etc/default/prometheus-node-exporter"
HOST_METRICS_FILE = "llmfleet_host.prom"  # what llmfleet-host-metrics writes into the textfile folder
HOST_METRICS_SCRIPT = "/usr/local/lib/llmfleet/llmfleet-host-metrics"
HOST_METRICS_UNIT = "llmfleet-host-metrics"  # .service (oneshot) and .timer


# Only the textfile collector's metrics, for a check that reads llmfleet's own: node_exporter's
# `collect[]` query parameter (README "Filtering enabled collectors"; node_exporter.go reads
# r.URL.Query()["collect[]"]). On the lab's Debian node_exporter 1.5.0: 147 lines in 2 ms against
# 1943 lines in 62 ms for every collector. node_textfile_scrape_error is the textfile collector's own.
NODE_EXPORTER_TEXTFILE_PATH = "/metrics?collect%5B%5D=textfile"


def node_exporter_args(settings: Settings) -> str:
    address = listen(settings.node_exporter_address, settings.host_service_ports["node_exporter"])
    return f"--web.listen-address={address} --collector.textfile.directory={settings.node_exporter_textfile_dir}"


def node_exporter_defaults(settings: Settings) -> str:
    return templates.render("node_exporter", "prometheus-node-exporter.j2", args=node_exporter_args(settings))


def host_metrics_script(settings: Settings) -> str:
    return templates.render("node_exporter", "llmfleet-host-metrics.j2",
                            textfile_dir=settings.node_exporter_textfile_dir, metrics_file=HOST_METRICS_FILE,
                            models_dir=settings.vllm_models_dir)


def host_metrics_units(settings: Settings) -> dict[str, str]:
    """{unit file name: content} of the host metrics' service and timer."""
    env = templates.environment("node_exporter")
    return {f"{HOST_METRICS_UNIT}.service": env.get_template(f"{HOST_METRICS_UNIT}.service.j2").render(
                script=HOST_METRICS_SCRIPT),
            f"{HOST_METRICS_UNIT}.timer": env.get_template(f"{HOST_METRICS_UNIT}.timer.j2").render(
                interval_s=settings.node_exporter_metrics_interval_s)}


