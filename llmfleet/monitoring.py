"""Monitoring hand-off: Prometheus scrape targets and alert rules for the vLLM hosts of an
inventory, from its resolved group data. Metric names come from llmfleet/compat.py's table for
each host's pinned vLLM version; the rules are grouped by version, so a fleet half-way through an
upgrade is watched with the right names on each half.

    llmfleet monitoring --inventory inventories/prod.py --out monitoring/
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from llmfleet import compat, frontdoor, layout

if TYPE_CHECKING:
    from llmfleet.schema import Settings

TEMPLATES = Path(__file__).resolve().parent.parent / "templates" / "monitoring"
# what the alert rules watch (llmfleet/compat.py METRICS purposes)
ALERT_METRICS = ("queue", "kv_cache", "http_requests", "e2e_latency")


def metric_names(vllm_version: str) -> list[str]:
    return [compat.metric(purpose, vllm_version) for purpose in ALERT_METRICS]


def render(inventory: str, hosts: dict[str, tuple[Settings, str]]) -> dict[str, str]:
    """hosts: {name: (Settings, address)} of the vLLM hosts. Returns {file name: content}."""
    targets: list[dict] = []
    frontdoors: list[dict] = []
    groups: dict[tuple[str, str], dict] = {}
    for name, (settings, address) in sorted(hosts.items()):
        if not settings.vllm_enabled:
            continue
        labels = {"host": name, "vllm_version": settings.vllm_version, "model": settings.vllm_served_model_name}
        instances = layout.instances(settings)
        if instances is None:
            targets.append({"targets": [f"{address}:{settings.vllm_port}"], "labels": labels})
        else:  # each instance through the front door's metrics port (instances listen on the host only)
            metrics_at = f"{address}:{settings.vllm_frontdoor_metrics_port}"
            targets += [{"targets": [metrics_at],
                         "labels": labels | {"instance": f"{name}/{i.name}", "vllm_instance": i.name,
                                             "gpus": ",".join(map(str, i.gpus)),
                                             "__metrics_path__": frontdoor.instance_metrics_path(i.name)}}
                        for i in instances]
            frontdoors.append({"targets": [metrics_at], "labels": {"host": name}})
        key = (settings.vllm_version, json.dumps(settings.vllm_alerts.model_dump(), sort_keys=True))
        groups.setdefault(key, {"version": settings.vllm_version, "a": settings.vllm_alerts,
                                "m": {p: compat.metric(p, settings.vllm_version) for p in ALERT_METRICS}})
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True)
    rules = env.get_template("vllm-alerts.yml.j2").render(inventory=inventory, groups=list(groups.values()))
    scrape = {"scrape_configs": [{"job_name": "vllm", "metrics_path": "/metrics", "scrape_interval": "15s",
                                  "file_sd_configs": [{"files": ["vllm-targets.yml"]}]}]}
    if frontdoors:  # HAProxy's own metrics, of the hosts with a serving layout
        scrape["scrape_configs"].append({"job_name": "frontdoor", "metrics_path": "/metrics", "scrape_interval": "15s",
                                         "file_sd_configs": [{"files": ["frontdoor-targets.yml"]}]})
    out = {"vllm-targets.yml": f"# Rendered by `llmfleet monitoring` from {inventory}\n" + yaml.safe_dump(targets),
           "vllm-alerts.yml": rules,
           "prometheus-scrape.yml": f"# Rendered by `llmfleet monitoring` from {inventory}\n" + yaml.safe_dump(scrape)}
    if frontdoors:
        out["frontdoor-targets.yml"] = (f"# Rendered by `llmfleet monitoring` from {inventory}\n"
                                        + yaml.safe_dump(frontdoors))
    for content in out.values():
        yaml.safe_load(content)  # what Prometheus would refuse, refused here
    return out
