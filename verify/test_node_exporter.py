"""node_exporter: the node exporter active and enabled with group data's arguments, answering where
group data says, its textfile collector serving llmfleet's host metrics (chrony, the models
folder's free space), written by the active timer within the last few intervals."""

import json

from llmfleet import addresses, node_exporter
from verify.helpers import expect, run_remote

TIMER = f"{node_exporter.HOST_METRICS_UNIT}.timer"


def test_node_exporter_serves_llmfleet_host_metrics(host, host_name, settings):
    port = settings.host_service_ports["node_exporter"]
    url = addresses.local_url(settings.node_exporter_address, port, node_exporter.NODE_EXPORTER_TEXTFILE_PATH)
    metrics_file = f"{settings.node_exporter_textfile_dir}/{node_exporter.HOST_METRICS_FILE}"
    state = run_remote(host, "telemetry_state", json.dumps({
        "units": [node_exporter.NODE_EXPORTER_SERVICE, TIMER],
        "files": [node_exporter.NODE_EXPORTER_DEFAULTS, metrics_file],
        "scrape": url, "prefixes": ["llmfleet_", "node_textfile_scrape_error"]}))
    running = {"active": "active", "enabled": "enabled"}
    expect(host_name, "node exporter and host metrics units",
           {node_exporter.NODE_EXPORTER_SERVICE: running, TIMER: running}, state["units"])
    defaults = state["files"][node_exporter.NODE_EXPORTER_DEFAULTS]
    expect(host_name, f"{node_exporter.NODE_EXPORTER_DEFAULTS} (node_exporter_address, node_exporter_textfile_dir, "
           "host_service_ports.node_exporter)", node_exporter.node_exporter_defaults(settings),
           defaults["content"] if defaults else None)
    assert state["scrape"]["error"] is None, (
        f"{host_name}: node exporter: expected to answer at {url}, actual {state['scrape']['error']}")
    samples = {name: value for name, _, value in state["scrape"]["samples"]}
    expect(host_name, "node exporter: textfile collector errors (node_textfile_scrape_error)", "0",
           samples.get("node_textfile_scrape_error"))
    expect(host_name, f"llmfleet host metrics served from {metrics_file}",
           ["llmfleet_chrony_synchronised", "llmfleet_models_dir_avail_bytes", "llmfleet_models_dir_size_bytes"],
           sorted(n for n in samples if n in ("llmfleet_chrony_synchronised", "llmfleet_models_dir_avail_bytes",
                                              "llmfleet_models_dir_size_bytes")))
    # a few intervals, and the timer's own accuracy, before it counts as stale
    age = state["now"] - state["files"][metrics_file]["mtime"]
    limit = 3 * settings.node_exporter_metrics_interval_s + 10
    assert age <= limit, (f"{host_name}: {metrics_file} (llmfleet-host-metrics.timer, "
                          f"node_exporter_metrics_interval_s): expected written within {limit} s, "
                          f"actual {age:.0f} s ago")
