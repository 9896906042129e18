"""Monitoring hand-off: a Prometheus configuration for an inventory, from its resolved group data.

`llmfleet monitoring --inventory inventories/prod.py --out monitoring/` writes what a Prometheus
loads as it is (`prometheus --config.file=monitoring/prometheus.yml`; the lab's Prometheus does):

- ``prometheus.yml``: intervals, the rule files, one scrape job per exporter, each reading its
  targets from a ``file_sd`` file beside it;
- ``<job>-targets.yml``: every host's node exporter (job ``node``), every GPU host's dcgm-exporter
  (``dcgm``), every vLLM endpoint (``vllm``; an instance of a serving layout through its front
  door), the front doors' own metrics (``frontdoor``), the fleet gateways' (``gateway``), and the
  node exporter that carries the audits' metrics (``llmfleet_audit``), labelled host, group, GPU
  profile (and instance where a host runs several);
- ``<area>-alerts.yml``: the alert rules of vLLM, the GPUs, the hosts and llmfleet's audits, with
  the thresholds and `for:` durations of group data (``ALERTS`` lists them).

Metric names: vLLM's from llmfleet/compat.py for each host's pinned version (the rules are
grouped by version, so a fleet half-way through an upgrade is watched with the right names on each
half); dcgm-exporter's are the DCGM field names of group data's counters file; the node exporter's
and llmfleet's own (``llmfleet_*``) are fixed. Where hosts have different thresholds, each rule
group selects its hosts by name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import yaml

from llmfleet import compat, frontdoor, templates, vllm_layout
from llmfleet.errors import InventoryError

if TYPE_CHECKING:
    from collections.abc import Callable

    from llmfleet.schema import Settings

# what the vLLM alert rules watch (llmfleet/compat.py METRICS purposes)
ALERT_METRICS = ("queue", "kv_cache", "http_requests", "e2e_latency")

# Every alert rule, by area (its rule file), with the group data that sets its threshold.
ALERTS: dict[str, dict[str, str]] = {
    "vllm": {"VllmDown": "up == 0", "VllmQueueBacklog": "vllm_alerts.queue_waiting",
             "VllmKvCacheFull": "vllm_alerts.kv_cache_usage", "VllmErrorRate": "vllm_alerts.error_ratio",
             "VllmLatencyHigh": "vllm_alerts.e2e_latency_p95_s"},
    "gpu": {"DcgmExporterDown": "up == 0", "GpuXidError": "any Xid",
            "GpuEccUncorrectable": "gpu_alerts.ecc_dbe_errors",
            "GpuRowRemapFailure": "any", "GpuRowRemapPending": "any", "GpuRetiredPagesPending": "any",
            "GpuMissing": "gpu_profiles.<profile>.count", "GpuThermalThrottling": "clock event reasons 0x20, 0x40",
            "GpuPowerThrottling": "clock event reasons 0x4, 0x8, 0x80",
            "GpuTemperatureHigh": "gpu_alerts.temperature_c",
            "GpuMemoryTemperatureHigh": "gpu_alerts.memory_temperature_c"},
    "host": {"NodeExporterDown": "up == 0", "ClockOffsetHigh": "chrony_max_offset_ms",
             "ClockNotSynchronised": "chrony leap status", "ModelsDirSpaceLow": "host_alerts.models_dir_free_gb",
             "HostMetricsStale": "5 x node_exporter_metrics_interval_s"},
    "audit": {"AuditProblems": "any open problem or expired waiver", "AuditTooOld": "audit_alerts.max_age_h",
              "AuditMetricsDown": "up == 0"},
}
ALERT_NAMES = [name for area in ALERTS.values() for name in area]
# the fleet-wide settings: every host of an inventory must agree on them
FLEET_SETTINGS = ("monitoring_scrape_interval_s", "monitoring_evaluation_interval_s", "audit_metrics_dir",
                  "audit_metrics_node_exporter", "audit_alerts")
HOST_METRICS_FILE = "llmfleet_host.prom"  # llmfleet's host metrics, in each node exporter's textfile folder
AUDIT_JOB = "llmfleet_audit"
NODE_JOB = "node"  # every host's node exporter (its textfile folder: host metrics, self-audits)
RENDERED_BY = "# Rendered by `llmfleet monitoring` from {inventory}\n"


class Host(NamedTuple):
    settings: Settings
    address: str
    group: str = ""  # the host's first group in the inventory (its most specific)
    groups: tuple[str, ...] = ()  # every group of the host (a gateway host is one of gateway_group's)


def metric_names(vllm_version: str) -> list[str]:
    return [compat.metric(purpose, vllm_version) for purpose in ALERT_METRICS]


def problems(settings: Settings) -> list[str]:
    """Monitoring settings that cannot work (for settings.validate)."""
    out = []
    missing = [n for n in ALERT_NAMES if n not in settings.monitoring_alert_for]
    unknown = sorted(set(settings.monitoring_alert_for) - set(ALERT_NAMES))
    if missing:
        out.append(f"monitoring_alert_for has no duration for {', '.join(missing)} (fix: add them, see "
                   "group_data/all.py)")
    for name in unknown:
        close = [n for n in ALERT_NAMES if n.lower() == name.lower()]
        fix = f"did you mean {close[0]}?" if close else "one of " + ", ".join(ALERT_NAMES)
        out.append(f"monitoring_alert_for.{name}: no such alert (fix: {fix})")
    for name in ("node_exporter", "dcgm_exporter"):
        if name not in settings.host_service_ports:
            out.append(f"host_service_ports has no {name!r} port (fix: add it; the exporter listens there)")
    if settings.dcgm_exporter_package is None and settings.dcgm_exporter_archive is None \
            and settings.gpu_profile is not None:
        out.append("dcgm_exporter_package = None and dcgm_exporter_archive = None: no way to install "
                   "dcgm-exporter on a GPU host (fix: set one of them, see group_data/all.py)")
    if settings.log_forward_target and not settings.log_forward_units and not settings.log_forward_kernel:
        out.append(f"log_forward_target = {settings.log_forward_target!r} with no log_forward_units and "
                   "log_forward_kernel False: nothing to forward (fix: name the units, or log_forward_target = None)")
    if (settings.audit_metrics_dir is None) != (settings.audit_metrics_node_exporter is None):
        out.append(f"audit_metrics_dir = {settings.audit_metrics_dir!r} and audit_metrics_node_exporter = "
                   f"{settings.audit_metrics_node_exporter!r}: set both (the folder the audit writes and the node "
                   "exporter that reads it) or neither")
    return out


def _fleet_value(hosts: dict[str, Host], name: str):
    values = {h.settings.model_dump()[name].__repr__(): n for n, h in sorted(hosts.items())}
    if len(values) > 1:
        shown = "; ".join(f"{host}: {value}" for value, host in values.items())
        raise InventoryError(f"{name} differs between hosts ({shown}): it is the fleet's one Prometheus setting "
                             "(fix: set it in group_data/all.py or the inventory's own group data, once)")
    return getattr(next(iter(hosts.values())).settings, name)


def _host_regex(names: list[str]) -> str:
    return "|".join(n.replace(".", "[.]") for n in names)


def _partition(hosts: dict[str, Host], key: Callable[[Settings], object]) -> list[tuple[str, Settings]]:
    """Hosts grouped by what their rules depend on: [(label selector (", host=~..." where the fleet
    has more than one group, else ""), the group's settings)]."""
    groups: dict[str, list[str]] = {}
    for name, h in sorted(hosts.items()):
        groups.setdefault(json.dumps(key(h.settings), sort_keys=True, default=str), []).append(name)
    if len(groups) == 1:
        names = next(iter(groups.values()))
        return [("", hosts[names[0]].settings)]
    return [(f', host=~"{_host_regex(names)}"', hosts[names[0]].settings) for names in groups.values()]


def _labels(name: str, h: Host) -> dict[str, str]:
    labels = {"host": name}
    if h.group:
        labels["group"] = h.group
    if h.settings.gpu_profile:
        labels["gpu_profile"] = h.settings.gpu_profile
    return labels


def _alert_for(settings: Settings, alert: str) -> str:
    """The rules' `for:` of an alert (monitoring_alert_for), as a template filter."""
    return settings.monitoring_alert_for[alert]


def render(inventory: str, hosts: Mapping[str, tuple]) -> dict[str, str]:
    """hosts: {name: Host(settings, address[, group])} of every host. Returns {file name: content}."""
    fleet = {name: Host(*value) for name, value in hosts.items()}
    if not fleet:
        raise InventoryError(f"{inventory} has no hosts: nothing to monitor")
    targets, gpu_hosts, vllm_hosts = _targets(fleet)
    audit_at = _fleet_value(fleet, "audit_metrics_node_exporter")
    if audit_at:  # the node exporter of the machine that runs the audits: its series carry their own host label
        targets[AUDIT_JOB].append({"targets": [audit_at], "labels": {}})
    rules = _rules(inventory, fleet, gpu_hosts, vllm_hosts, audit_at)

    scrape_s = _fleet_value(fleet, "monitoring_scrape_interval_s")
    config: dict = {
        "global": {"scrape_interval": f"{scrape_s}s",
                   "evaluation_interval": f"{_fleet_value(fleet, 'monitoring_evaluation_interval_s')}s"},
        "rule_files": sorted(rules),
        "scrape_configs": [],
    }
    out: dict[str, str] = {}
    for job, found in targets.items():
        if not found:
            continue
        scrape: dict = {"job_name": job, "metrics_path": "/metrics",
                        "file_sd_configs": [{"files": [f"{job}-targets.yml"]}]}
        if job == AUDIT_JOB:
            scrape["honor_labels"] = True  # the audited host's name is the series' own `host` label
        config["scrape_configs"].append(scrape)
        out[f"{job}-targets.yml"] = RENDERED_BY.format(inventory=inventory) + yaml.safe_dump(found)
    out.update(rules)
    out["prometheus.yml"] = RENDERED_BY.format(inventory=inventory) + yaml.safe_dump(config, sort_keys=False)
    for content in out.values():
        yaml.safe_load(content)  # what Prometheus would refuse, refused here
    return out


def _targets(fleet: dict[str, Host]) -> tuple[dict[str, list[dict]], dict[str, Host], dict[str, Host]]:
    """The file_sd targets of each job (the audit's job left empty), the GPU hosts, the vLLM hosts."""
    targets: dict[str, list[dict]] = {"node": [], "dcgm": [], "vllm": [], "frontdoor": [], "gateway": [],
                                      AUDIT_JOB: []}
    gpu_hosts: dict[str, Host] = {}
    vllm_hosts: dict[str, Host] = {}
    for name, h in sorted(fleet.items()):
        s = h.settings
        base = _labels(name, h)
        targets["node"].append({"targets": [f"{h.address}:{s.host_service_ports['node_exporter']}"], "labels": base})
        if s.gpu_profile:
            gpu_hosts[name] = h
            targets["dcgm"].append({"targets": [f"{h.address}:{s.host_service_ports['dcgm_exporter']}"],
                                    "labels": base})
        if s.gateway_group in h.groups:  # the fleet gateway's HAProxy metrics (llmfleet/gateway.py)
            targets["gateway"].append({"targets": [f"{h.address}:{s.gateway_metrics_port}"], "labels": base})
        if not s.vllm_enabled:
            continue
        vllm_hosts[name] = h
        labels = base | {"vllm_version": s.vllm_version, "model": s.vllm_served_model_name}
        instances = vllm_layout.instances(s)
        if instances is None:
            targets["vllm"].append({"targets": [f"{h.address}:{s.vllm_port}"], "labels": labels})
        else:  # each instance through the front door's metrics port (instances listen on the host only)
            metrics_at = f"{h.address}:{s.frontdoor_metrics_port}"
            targets["vllm"] += [{"targets": [metrics_at],
                                 "labels": labels | {"instance": f"{name}/{i.name}", "vllm_instance": i.name,
                                                     "gpus": ",".join(map(str, i.gpus)),
                                                     "__metrics_path__": frontdoor.instance_metrics_path(i.name)}}
                                for i in instances]
            targets["frontdoor"].append({"targets": [metrics_at], "labels": base})
    return targets, gpu_hosts, vllm_hosts


def _rules(inventory: str, fleet: dict[str, Host], gpu_hosts: dict[str, Host], vllm_hosts: dict[str, Host],
           audit_at: str | None) -> dict[str, str]:
    """The alert rule files: {file name: content} (vLLM's and the GPUs' where the fleet has such hosts,
    the hosts', the audits' where an audit node exporter is set)."""
    env = templates.environment("monitoring", keep_trailing_newline=False, for_=_alert_for)
    rules: dict[str, str] = {}
    if vllm_hosts:
        groups = []
        for version in sorted({h.settings.vllm_version for h in vllm_hosts.values()}):
            same = {n: h for n, h in vllm_hosts.items() if h.settings.vllm_version == version}
            parts = _partition(same, lambda s: (s.vllm_alerts.model_dump(), s.monitoring_alert_for))
            groups += [{"name": f"llmfleet-vllm-{version}" + (f"-{i + 1}" if len(parts) > 1 else ""),
                        "sel": f'vllm_version="{version}"' + sel, "s": s, "a": s.vllm_alerts,
                        "m": {p: compat.metric(p, version) for p in ALERT_METRICS}}
                       for i, (sel, s) in enumerate(parts)]
        rules["vllm-alerts.yml"] = env.get_template("vllm-alerts.yml.j2").render(inventory=inventory, groups=groups)
    if gpu_hosts:
        profiles = {}
        for h in gpu_hosts.values():
            profile = h.settings.profile
            if profile is not None:
                profiles[h.settings.gpu_profile] = profile.count
        parts = _partition(gpu_hosts, lambda s: (s.gpu_alerts.model_dump(), s.monitoring_alert_for))
        rules["gpu-alerts.yml"] = env.get_template("gpu-alerts.yml.j2").render(
            inventory=inventory, profiles=sorted(profiles.items()),
            groups=[{"name": "llmfleet-gpu" + (f"-{i + 1}" if len(parts) > 1 else ""), "sel": sel, "s": s,
                     "a": s.gpu_alerts} for i, (sel, s) in enumerate(parts)])
    parts = _partition(fleet, lambda s: (s.chrony_max_offset_ms, s.host_alerts.model_dump(),
                                         s.node_exporter_metrics_interval_s, s.monitoring_alert_for))
    rules["host-alerts.yml"] = env.get_template("host-alerts.yml.j2").render(
        inventory=inventory, metrics_file=HOST_METRICS_FILE,
        groups=[{"name": "llmfleet-host" + (f"-{i + 1}" if len(parts) > 1 else ""), "sel": sel, "s": s,
                 "offset_s": s.chrony_max_offset_ms / 1000, "free_bytes": int(s.host_alerts.models_dir_free_gb * 2**30),
                 "stale_s": 5 * s.node_exporter_metrics_interval_s} for i, (sel, s) in enumerate(parts)])
    # the hosts' own audits (llmfleet/self_audit.py), through each host's node exporter
    self_hosts = sorted(n for n, h in fleet.items() if h.settings.self_audit_enabled)
    if audit_at or self_hosts:
        first = next(iter(fleet.values())).settings
        for_ = _partition(fleet, lambda s: s.monitoring_alert_for)
        if len(for_) > 1:
            _fleet_value(fleet, "monitoring_alert_for")  # one audit job for the fleet: one set of durations
        rules["audit-alerts.yml"] = env.get_template("audit-alerts.yml.j2").render(
            inventory=inventory, job=AUDIT_JOB if audit_at else None, node_job=NODE_JOB, s=first,
            self_hosts=_host_regex(self_hosts),
            max_age_s=int(first.audit_alerts.max_age_h * 3600))
    return rules


def hosts_from(validated: list[tuple[dict, Settings]]) -> dict[str, Host]:
    """Hosts to monitor from llmfleet.inventory.validated(): settings, address, first group."""
    return {h["name"]: Host(settings, h["data"].get("ssh_hostname") or h["name"], (h.get("groups") or [""])[0],
                            tuple(h.get("groups") or ()))
            for h, settings in validated}


def write(inventory: str, hosts: Mapping[str, tuple], out_dir: Path) -> list[Path]:
    """Render into out_dir, each file replaced whole (Prometheus may be reading them); files of
    jobs or rules the fleet no longer has are removed. Returns the paths written."""
    files = render(inventory, hosts)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in files.items():
        path = out_dir / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(content)
        tmp.replace(path)
        written.append(path)
    for old in out_dir.glob("*.yml"):
        if old.name not in files and re.fullmatch(r"[a-z_]+-(targets|alerts)\.yml", old.name):
            old.unlink()
    return written


FEDERATED = ('{__name__=~"llmfleet_audit_.*"}', 'up{job="node"}')  # what a fleet-wide view of the audits needs


def federation(sites: Mapping[str, str], interval_s: int = 60) -> str:
    """A global Prometheus's configuration that gathers every site's audits (the hosts' self-audits
    and the control machines' audits) by federation: one job a site, scraping the site Prometheus's
    /federate for the llmfleet_audit_* series and the node targets' `up`, labelled site=<name>
    (honor_labels: the series keep their own host). {site: its Prometheus's URL}."""
    jobs = []
    for site, url in sorted(sites.items()):
        scheme, _, address = url.partition("://")
        jobs.append({"job_name": f"llmfleet-federate-{site}", "honor_labels": True, "metrics_path": "/federate",
                     "scheme": scheme or "http", "params": {"match[]": list(FEDERATED)},
                     "static_configs": [{"targets": [address.rstrip("/")], "labels": {"site": site}}]})
    config = {"global": {"scrape_interval": f"{interval_s}s"}, "scrape_configs": jobs}
    return "# llmfleet.monitoring.federation(): the fleet's audits from every site's Prometheus\n" + \
        yaml.safe_dump(config, sort_keys=False)
