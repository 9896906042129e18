"""What `llmfleet monitoring` renders, proven by the distribution's Prometheus tools: `promtool check
config` and `promtool check rules` pass on the rendered files, and `promtool test rules` fires every
alert rule (and leaves it quiet on healthy values) from input series named as the real exporters
name them:

- dcgm-exporter: a series is named as its DCGM field (group data's dcgm_exporter_counters; DCGM
  dcgmlib/dcgm_fields.h), labelled gpu, UUID, pci_bus_id, device, modelName, Hostname,
  DCGM_FI_DRIVER_VERSION as dcgm-exporter labels them (its /metrics as observed on an L4 host);
- node exporter: Prometheus's own `up`, and node_textfile_mtime_seconds{file} of its textfile
  collector (node_exporter collector/textfile.go); llmfleet's host metrics as the host metrics
  script writes them (test_host_metrics_names_are_the_scripts_own below);
- vLLM: the names of llmfleet/compat.py METRICS for the pinned version (checked against a live
  /metrics by tests/integration/test_vllm.py), with vLLM's own model_name label;
- the audit: the names llmfleet/audit/metrics.py writes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from llmfleet import compat, monitoring, node_exporter
from llmfleet.audit import metrics as audit_metrics
from llmfleet.errors import InventoryError
from llmfleet.schema import defaults as schema_defaults
from llmfleet.settings import SettingsError, validate

ROOT = Path(__file__).resolve().parents[2]
MODEL = {"name": "llama", "version": "1", "source": "https://models.internal/l.tar", "sha256": "a" * 64,
         "torch_dtype": "float16", "num_attention_heads": 32}
AUDIT = {"audit_metrics_dir": "/var/lib/prometheus/node-exporter", "audit_metrics_node_exporter": "ctl:9100"}
PROFILE = "v100_sxm2_32gb_x8"


def data(**override) -> dict:
    d = schema_defaults()
    return {k: v for k, v in d.items() if not k.startswith("__")} | {"vllm_model": MODEL} | AUDIT | override


def settings(name: str = "gpu-1", **override):
    return validate(name, data(**override))


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    tool = shutil.which("promtool")
    assert tool, "promtool not found: it comes with the Debian package prometheus (make sysdeps)"
    return subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """One GPU host serving vLLM, with the audit's metrics configured: every rule file."""
    out = tmp_path_factory.mktemp("monitoring")
    monitoring.write("inventories/prod.py", {"gpu-1": (settings(), "10.0.0.1", "v100")}, out)
    return out


def test_the_rendered_configuration_and_rules_pass_promtool(rendered):
    assert sorted(p.name for p in rendered.iterdir()) == [
        "audit-alerts.yml", "dcgm-targets.yml", "gpu-alerts.yml", "host-alerts.yml", "llmfleet_audit-targets.yml",
        "node-targets.yml", "prometheus.yml", "vllm-alerts.yml", "vllm-targets.yml"]
    check = promtool("check", "config", "prometheus.yml", cwd=rendered)
    assert check.returncode == 0, check.stdout + check.stderr
    rules = promtool("check", "rules", *sorted(p.name for p in rendered.glob("*-alerts.yml")), cwd=rendered)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    rendered_alerts = {r["alert"] for f in rendered.glob("*-alerts.yml")
                       for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"]}
    assert rendered_alerts == set(monitoring.ALERT_NAMES)


def test_every_exporter_and_vllm_endpoint_is_a_target_with_host_group_and_profile(rendered):
    config = yaml.safe_load((rendered / "prometheus.yml").read_text())
    assert config["global"] == {"scrape_interval": "15s", "evaluation_interval": "15s"}
    assert [j["job_name"] for j in config["scrape_configs"]] == ["node", "dcgm", "vllm", "llmfleet_audit"]
    assert config["scrape_configs"][-1]["honor_labels"] is True  # the audited host's name is the series' own
    labels = {"host": "gpu-1", "group": "v100", "gpu_profile": PROFILE}
    assert yaml.safe_load((rendered / "node-targets.yml").read_text()) == [
        {"targets": ["10.0.0.1:9100"], "labels": labels}]
    assert yaml.safe_load((rendered / "dcgm-targets.yml").read_text()) == [
        {"targets": ["10.0.0.1:9400"], "labels": labels}]
    assert yaml.safe_load((rendered / "vllm-targets.yml").read_text()) == [
        {"targets": ["10.0.0.1:8000"], "labels": labels | {"vllm_version": "0.19.1", "model": "default"}}]
    assert yaml.safe_load((rendered / "llmfleet_audit-targets.yml").read_text()) == [
        {"targets": ["ctl:9100"], "labels": {}}]


def test_a_host_without_gpus_has_no_dcgm_target_and_no_gpu_rules(tmp_path):
    files = monitoring.render("inv.py", {"web-1": (settings("web-1", gpu_profile=None), "10.0.0.9", "cpu")})
    assert "dcgm-targets.yml" not in files and "gpu-alerts.yml" not in files
    assert yaml.safe_load(files["node-targets.yml"]) == [{"targets": ["10.0.0.9:9100"],
                                                          "labels": {"host": "web-1", "group": "cpu"}}]


def test_a_gateway_host_is_scraped_on_its_metrics_port_as_job_gateway():
    gw = settings("gw-1", gpu_profile=None, vllm_enabled=False)
    files = monitoring.render("inv.py", {"gw-1": (gw, "10.0.0.2", "gateways", ("gateways",)),
                                         "gpu-1": (settings(), "10.0.0.1", "v100", ("v100",))})
    assert yaml.safe_load(files["gateway-targets.yml"]) == [{"targets": ["10.0.0.2:8405"],
                                                             "labels": {"host": "gw-1", "group": "gateways"}}]
    assert "gateway" in [j["job_name"] for j in yaml.safe_load(files["prometheus.yml"])["scrape_configs"]]
    # a serving host is not a gateway
    assert "gateway-targets.yml" not in monitoring.render("inv.py", {"gpu-1": (settings(), "10.0.0.1", "v100")})


def test_hosts_with_other_thresholds_get_rule_groups_of_their_own():
    hot = settings("gpu-2", gpu_alerts={"temperature_c": 80, "memory_temperature_c": 95, "ecc_dbe_errors": 0})
    files = monitoring.render("inv.py", {"gpu-1": (settings(), "10.0.0.1", "a"), "gpu-2": (hot, "10.0.0.2", "a"),
                                         "gpu-3": (settings("gpu-3"), "10.0.0.3", "a")})
    temps = {g["name"]: next(r["expr"] for r in g["rules"] if r["alert"] == "GpuTemperatureHigh")
             for g in yaml.safe_load(files["gpu-alerts.yml"])["groups"]}
    assert temps == {"llmfleet-gpu-1": 'DCGM_FI_DEV_GPU_TEMP{job="dcgm", host=~"gpu-1|gpu-3"} > 85',
                     "llmfleet-gpu-2": 'DCGM_FI_DEV_GPU_TEMP{job="dcgm", host=~"gpu-2"} > 80'}
    # the host rules do not differ between them: one group, no host selector
    assert [g["name"] for g in yaml.safe_load(files["host-alerts.yml"])["groups"]] == ["llmfleet-host"]


def test_a_fleet_setting_that_differs_between_hosts_is_refused_with_both_values():
    with pytest.raises(InventoryError, match=r"monitoring_scrape_interval_s differs between hosts \(gpu-1: 15; "
                                             r"gpu-2: 30\)"):
        monitoring.render("inv.py", {"gpu-1": (settings(), "10.0.0.1"),
                                     "gpu-2": (settings("gpu-2", monitoring_scrape_interval_s=30), "10.0.0.2")})


@pytest.mark.parametrize("override,message", [
    ({"monitoring_alert_for": {"VllmDown": "2m"}}, "monitoring_alert_for has no duration for VllmQueueBacklog"),
    ({"monitoring_alert_for": dict.fromkeys(monitoring.ALERT_NAMES, "1m") | {"GpuXIDError": "1m"}},
     "monitoring_alert_for.GpuXIDError: no such alert (fix: did you mean GpuXidError?)"),
    ({"monitoring_alert_for": dict.fromkeys(monitoring.ALERT_NAMES, "5 minutes")},
     "monitoring_alert_for.VllmDown = '5 minutes': not a Prometheus duration like 30s, 5m, 1h"),
    ({"dcgm_exporter_package": None}, "dcgm_exporter_package = None and dcgm_exporter_archive = None: no way to "
                                      "install dcgm-exporter on a GPU host"),
    ({"audit_metrics_node_exporter": None}, "set both (the folder the audit writes and the node exporter"),
    ({"log_forward_target": "syslog.internal"}, "log_forward_target = 'syslog.internal': not host:port"),
    ({"log_forward_target": "syslog.internal:514", "log_forward_units": [], "log_forward_kernel": False},
     "log_forward_target = 'syslog.internal:514' with no log_forward_units and log_forward_kernel False"),
    ({"dcgm_exporter_counters": [["DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature, in C"]]},
     "dcgm_exporter_counters.0.2 = 'GPU temperature, in C': not one line of help without commas"),
    ({"host_service_ports": {"node_exporter": 9100}}, "host_service_ports has no 'dcgm_exporter' port"),
])
def test_monitoring_settings_that_cannot_work_are_refused_before_any_host(override, message):
    with pytest.raises(SettingsError) as exc:
        settings(**override)
    assert message in str(exc.value), str(exc.value)


def test_rule_names_are_the_names_the_exporters_and_llmfleet_write(rendered):
    exprs = {f.name: " ".join(r["expr"] for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"])
             for f in rendered.glob("*-alerts.yml")}
    fields = {field for field, _, _ in settings().dcgm_exporter_counters}
    used = set(re.findall(r"\bDCGM_FI_[A-Z0-9_]+", exprs["gpu-alerts.yml"]))
    assert used and used <= fields, used - fields
    script = node_exporter.host_metrics_script(settings())
    used = set(re.findall(r"\bllmfleet_[a-z_]+\b(?!\.)", exprs["host-alerts.yml"]))  # not the file's name
    assert used and all(f"{name} " in script or f"{name}{{" in script for name in used), used
    written = set(audit_metrics.HELP) | set(audit_metrics.FLEET_HELP)
    used = set(re.findall(r"\bllmfleet_audit_[a-z_]+", exprs["audit-alerts.yml"]))
    assert used and used <= written, used - written
    found = re.findall(r"vllm:[a-z0-9_]+|http_requests_total", exprs["vllm-alerts.yml"])
    vllm = {n.removesuffix("_bucket") for n in found}
    assert vllm == {compat.metric(p, "0.19.1") for p in monitoring.ALERT_METRICS}


# --- promtool test rules: every alert fires from exporter-named series, and stays quiet on healthy ones
HOST = {"host": "gpu-1", "group": "v100", "gpu_profile": PROFILE}
NODE = {"job": "node", "instance": "10.0.0.1:9100"} | HOST
DCGM = {"job": "dcgm", "instance": "10.0.0.1:9400"} | HOST
VLLM = {"job": "vllm", "instance": "10.0.0.1:8000"} | HOST | {"vllm_version": "0.19.1", "model": "default"}
AUDIT_JOB = {"job": "llmfleet_audit", "instance": "ctl:9100"}


def gpu(i: int) -> dict:
    return DCGM | {"gpu": str(i), "UUID": f"GPU-0000000{i}-1111-2222-3333-444444444444",
                   "pci_bus_id": f"00000000:1{i}:00.0", "device": f"nvidia{i}", "modelName": "Tesla V100-SXM2-32GB",
                   "Hostname": "gpu-1", "DCGM_FI_DRIVER_VERSION": "580.95.05"}


def series(name: str, labels: dict, values: str) -> dict:
    return {"series": name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": values}


def fired(labels: dict, severity: str, group: str, summary: str) -> dict:
    return {"exp_labels": labels | {"severity": severity, "rules": group}, "exp_annotations": {"summary": summary}}


G0 = gpu(0)
# (alert, input series, eval time, expected alerts); 1-minute samples; every `for:` is group data's default
CASES = [
    # vLLM (vllm_alerts)
    ("VllmDown", [series("up", VLLM, "1 0x5")], "5m",
     [fired(VLLM, "critical", "llmfleet-vllm-0.19.1", "vLLM on gpu-1 does not answer /metrics")]),
    ("VllmQueueBacklog", [series("vllm:num_requests_waiting", VLLM | {"model_name": "default"}, "80x10")], "8m",
     [fired({"host": "gpu-1"}, "warning", "llmfleet-vllm-0.19.1", "more than 50 requests waiting on gpu-1")]),
    ("VllmKvCacheFull", [series("vllm:kv_cache_usage_perc", VLLM | {"model_name": "default"}, "0.99x15")], "12m",
     [fired({"host": "gpu-1"}, "warning", "llmfleet-vllm-0.19.1",
            "KV cache above 95% on gpu-1 (preemptions follow)")]),
    ("VllmErrorRate", [series("http_requests_total", VLLM | {"handler": "/v1/completions", "method": "POST",
                                                             "status": "5xx"}, "0+10x15"),
                       series("http_requests_total", VLLM | {"handler": "/v1/completions", "method": "POST",
                                                             "status": "2xx"}, "0+90x15")], "12m",
     [fired({"host": "gpu-1"}, "critical", "llmfleet-vllm-0.19.1", "more than 5.0% of requests fail on gpu-1")]),
    ("VllmLatencyHigh", [series("vllm:e2e_request_latency_seconds_bucket", VLLM | {"model_name": "default", "le": le},
                                values) for le, values in (("10.0", "0x20"), ("60.0", "0+10x20"),
                                                           ("+Inf", "0+10x20"))], "18m",
     [fired({"host": "gpu-1"}, "warning", "llmfleet-vllm-0.19.1", "p95 end-to-end latency above 30.0s on gpu-1")]),
    # GPUs (gpu_alerts, the profile's GPU count, NVML's clock event reasons)
    ("DcgmExporterDown", [series("up", DCGM, "0x10")], "6m",
     [fired(DCGM, "critical", "llmfleet-gpu", "dcgm-exporter on gpu-1 does not answer: its GPUs are not watched")]),
    ("GpuXidError", [series("DCGM_FI_DEV_XID_ERRORS", G0, "0 0 79 79")], "3m",
     [fired(G0, "critical", "llmfleet-gpu",
            "GPU 0 on gpu-1 reported Xid 79 (the kernel log has the line: NVRM: Xid)")]),
    ("GpuEccUncorrectable", [series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", G0, "0 0 2 2")], "3m",
     [fired(G0, "critical", "llmfleet-gpu", "GPU 0 on gpu-1: 2 uncorrectable (double-bit) ECC errors since the "
            "driver loaded (more than 0)")]),
    ("GpuRowRemapFailure", [series("DCGM_FI_DEV_ROW_REMAP_FAILURE", G0, "0 1 1")], "2m",
     [fired(G0, "critical", "llmfleet-gpu", "GPU 0 on gpu-1: row remapping failed (the GPU needs replacing)")]),
    ("GpuRowRemapPending", [series("DCGM_FI_DEV_ROW_REMAP_PENDING", G0, "0 1 1")], "2m",
     [fired(G0, "warning", "llmfleet-gpu", "GPU 0 on gpu-1: a row remap is pending (reset the GPU: drain the host, "
            "reboot)")]),
    ("GpuRetiredPagesPending", [series("DCGM_FI_DEV_RETIRED_PENDING", G0, "0 1 1")], "2m",
     [fired(G0, "warning", "llmfleet-gpu", "GPU 0 on gpu-1: pages pending retirement (reset the GPU: drain the "
            "host, reboot)")]),
    ("GpuMissing", [series("up", DCGM, "1x10")] + [series("DCGM_FI_DEV_GPU_TEMP", gpu(i), "40x10") for i in range(7)],
     "6m", [fired({"host": "gpu-1"}, "critical", "llmfleet-gpu",
                  f"7 GPUs report on gpu-1, gpu_profile {PROFILE} has 8 (a GPU fell off the bus?)")]),
    ("GpuThermalThrottling", [series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", G0, "32x20")], "16m",  # SW thermal 0x20
     [fired(G0, "warning", "llmfleet-gpu", "GPU 0 on gpu-1 holds its clocks down for temperature (SW or HW thermal "
            "slowdown)")]),
    ("GpuPowerThrottling", [series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", G0, "128x20")], "16m",  # HW power brake 0x80
     [fired(G0, "warning", "llmfleet-gpu", "GPU 0 on gpu-1 holds its clocks down for power (SW power cap, HW "
            "slowdown or power brake)")]),
    ("GpuTemperatureHigh", [series("DCGM_FI_DEV_GPU_TEMP", G0, "90x10")], "6m",
     [fired(G0, "warning", "llmfleet-gpu", "GPU 0 on gpu-1 at 90 C (above 85 C)")]),
    ("GpuMemoryTemperatureHigh", [series("DCGM_FI_DEV_MEMORY_TEMP", G0, "99x10")], "6m",
     [fired(G0, "warning", "llmfleet-gpu", "GPU 0 memory on gpu-1 at 99 C (above 95 C)")]),
    # hosts (chrony_max_offset_ms, host_alerts, node_exporter_metrics_interval_s)
    ("NodeExporterDown", [series("up", NODE, "0x5")], "3m",
     [fired(NODE, "critical", "llmfleet-host", "the node exporter on gpu-1 does not answer (the host is down, or "
            "its exporter)")]),
    ("ClockOffsetHigh", [series("llmfleet_chrony_offset_seconds", NODE, "-0.2x10")], "6m",
     [fired(NODE, "warning", "llmfleet-host", "the clock of gpu-1 is 0.2 s off NTP time (chrony_max_offset_ms: "
            "50.0 ms)")]),
    ("ClockNotSynchronised", [series("llmfleet_chrony_synchronised", NODE, "0x15")], "11m",
     [fired(NODE, "warning", "llmfleet-host", "chrony on gpu-1 is not synchronised (chronyc tracking: leap status "
            "not Normal)")]),
    ("ModelsDirSpaceLow", [series("llmfleet_models_dir_avail_bytes", NODE | {"path": "/data/models"},
                                  "10737418240x15")], "11m",
     [fired(NODE | {"path": "/data/models"}, "warning", "llmfleet-host",
            "/data/models on gpu-1 has 10GiB free (below 50 GiB)")]),
    ("HostMetricsStale", [series("node_textfile_mtime_seconds",
                                 NODE | {"file": "/var/lib/prometheus/node-exporter/llmfleet_host.prom"}, "0x15")],
     "11m", [fired(NODE | {"file": "/var/lib/prometheus/node-exporter/llmfleet_host.prom"}, "warning",
                   "llmfleet-host", "llmfleet's host metrics on gpu-1 were last written 11m 0s ago "
                   "(llmfleet-host-metrics.timer)")]),
    # the audit (audit_alerts)
    ("AuditProblems", [series("llmfleet_audit_problems", AUDIT_JOB | {"host": "gpu-1", "inventory": "inv.py",
                                                                       "kind": kind}, values)
                       for kind, values in (("config", "0 2"), ("state", "0 1"), ("hardware", "0 0"))], "1m",
     [fired({"host": "gpu-1"}, "warning", "llmfleet-audit", "the last audit found 3 open problem(s) on gpu-1 "
            "(llmfleet audit: the report names them and their repair)")]),
    ("AuditTooOld", [series("llmfleet_audit_timestamp_seconds", AUDIT_JOB | {"host": "gpu-1", "inventory": "inv.py"},
                            "0x30")], "27h",  # hourly samples (every sample fresh at its hour)
     [fired(AUDIT_JOB | {"host": "gpu-1", "inventory": "inv.py"}, "warning", "llmfleet-audit",
            "no audit of gpu-1 within 26 h (audits stopped?)")]),
    ("AuditMetricsDown", [series("up", AUDIT_JOB, "0x10")], "6m",
     [fired(AUDIT_JOB, "warning", "llmfleet-audit", "the node exporter that carries the audits' metrics (ctl:9100) "
            "does not answer")]),
]
# healthy values: the same rules stay quiet
QUIET = [
    ("VllmDown", [series("up", VLLM, "1x10")], "6m"),
    ("GpuXidError", [series("DCGM_FI_DEV_XID_ERRORS", G0, "0x10")], "6m"),
    ("GpuMissing", [series("up", DCGM, "1x10")] + [series("DCGM_FI_DEV_GPU_TEMP", gpu(i), "40x10") for i in range(8)],
     "6m"),
    ("GpuThermalThrottling", [series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", G0, "4x20")], "16m"),  # power cap only
    ("GpuPowerThrottling", [series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", G0, "1x20")], "16m"),  # GPU idle only
    ("GpuTemperatureHigh", [series("DCGM_FI_DEV_GPU_TEMP", G0, "70x10")], "6m"),
    ("ClockOffsetHigh", [series("llmfleet_chrony_offset_seconds", NODE, "0.001x10")], "6m"),
    ("ModelsDirSpaceLow", [series("llmfleet_models_dir_avail_bytes", NODE | {"path": "/data/models"},
                                  "107374182400x15")], "11m"),
    ("AuditProblems", [series("llmfleet_audit_problems", AUDIT_JOB | {"host": "gpu-1", "inventory": "inv.py",
                                                                       "kind": "state"}, "0x5")], "3m"),
    ("AuditTooOld", [series("llmfleet_audit_timestamp_seconds", AUDIT_JOB | {"host": "gpu-1", "inventory": "inv.py"},
                            "0+60x30")], "20m"),
]


def test_every_alert_rule_has_a_case_that_fires_it():
    assert sorted(name for name, *_ in CASES) == sorted(monitoring.ALERT_NAMES)


def test_promtool_fires_every_alert_from_exporter_named_series_and_not_on_healthy_ones(rendered):
    tests = [{"name": f"{alert} fires", "interval": "1h" if at.endswith("h") else "1m", "input_series": inputs,
              "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}]}
             for alert, inputs, at, expected in CASES]
    tests += [{"name": f"{alert} stays quiet", "interval": "1m", "input_series": inputs,
               "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": []}]}
              for alert, inputs, at in QUIET]
    # an audit that never reported: AuditTooOld from absent()
    tests.append({"name": "AuditTooOld fires when no audit ever reported", "interval": "1m",
                  "input_series": [series("up", AUDIT_JOB, "1x5")],
                  "alert_rule_test": [{"eval_time": "2m", "alertname": "AuditTooOld", "exp_alerts": [
                      fired({"job": "llmfleet_audit"}, "warning", "llmfleet-audit",
                            "no audit of  within 26 h (audits stopped?)")]}]})
    (rendered / "tests.yml").write_text(yaml.safe_dump({
        "rule_files": sorted(p.name for p in rendered.glob("*-alerts.yml")), "evaluation_interval": "1m",
        "tests": tests}, sort_keys=False))
    proc = promtool("test", "rules", "tests.yml", cwd=rendered)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    assert "SUCCESS" in proc.stdout + proc.stderr


# --- the hosts' own audits (llmfleet/self_audit.py): through each host's node exporter, source="self"
SELF = NODE | {"inventory": "inv.py", "source": "self"}


def _self_rule_tests() -> list[dict]:
    labels = {"severity": "warning", "rules": "llmfleet-audit", "source": "self"}

    def case(name, inputs, at, expected, interval="1m"):
        return {"name": name, "interval": interval, "input_series": inputs,
                "alert_rule_test": [{"eval_time": at, "alertname": name.split()[0], "exp_alerts": expected}]}

    too_old = "no self-audit of gpu-1 within 26 h (llmfleet-self-audit.timer stopped, or its runs fail: " \
              "journalctl -u llmfleet-self-audit.service)"
    return [
        case("AuditProblems fires on a self-audit's problems",
             [series("llmfleet_audit_problems", SELF | {"kind": k}, v)
              for k, v in (("state", "0 2"), ("hardware", "0 1"))],
             "1m", [{"exp_labels": {"host": "gpu-1"} | labels, "exp_annotations": {"summary": (
                 "the self-audit of gpu-1 found 3 open problem(s) (llmfleet audit --from-prometheus URL names them "
                 "and their repair)")}}]),
        case("AuditTooOld fires on a host whose self-audit stopped",
             [series("llmfleet_audit_timestamp_seconds", SELF, "0x30")], "27h",
             [{"exp_labels": SELF | labels, "exp_annotations": {"summary": too_old}}], interval="1h"),
        case("AuditTooOld fires on a host whose self-audit never ran", [series("up", NODE, "1x5")], "2m",
             [{"exp_labels": NODE | labels, "exp_annotations": {"summary": too_old}}]),
        case("AuditTooOld stays quiet while the self-audit runs",
             [series("up", NODE, "1x30"), series("llmfleet_audit_timestamp_seconds", SELF, "0+60x30")], "20m", []),
        case("AuditProblems stays quiet on a clean self-audit",
             [series("llmfleet_audit_problems", SELF | {"kind": "state"}, "0x5")], "3m", []),
    ]


def test_promtool_fires_the_self_audit_rules_and_keeps_them_quiet_on_a_running_clean_one(tmp_path):
    monitoring.write("inv.py", {"gpu-1": (settings(audit_metrics_dir=None, audit_metrics_node_exporter=None),
                                          "10.0.0.1", "v100")}, tmp_path)
    rules = yaml.safe_load((tmp_path / "audit-alerts.yml").read_text())["groups"][0]["rules"]
    assert [r["alert"] for r in rules] == ["AuditProblems", "AuditTooOld"]  # no control audit job: its rules left out
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({
        "rule_files": ["audit-alerts.yml"], "evaluation_interval": "1m", "tests": _self_rule_tests()}, sort_keys=False))
    proc = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]


def test_a_fleet_without_self_audits_or_audit_metrics_has_no_audit_rules(tmp_path):
    off = settings(audit_metrics_dir=None, audit_metrics_node_exporter=None, self_audit_enabled=False)
    assert "audit-alerts.yml" not in monitoring.render("inv.py", {"gpu-1": (off, "10.0.0.1", "v100")})


def test_the_federation_of_several_sites_is_a_configuration_prometheus_accepts(tmp_path):
    text = monitoring.federation({"ams": "http://prometheus.ams.internal:9090", "sjc": "https://prom.sjc:9090"})
    (tmp_path / "federate.yml").write_text(text)
    check = promtool("check", "config", "federate.yml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    jobs = yaml.safe_load(text)["scrape_configs"]
    assert [(j["job_name"], j["scheme"], j["static_configs"][0]["labels"]["site"]) for j in jobs] == [
        ("llmfleet-federate-ams", "http", "ams"), ("llmfleet-federate-sjc", "https", "sjc")]
    assert all(j["honor_labels"] and j["params"]["match[]"] == list(monitoring.FEDERATED) for j in jobs)
    example = (Path(__file__).resolve().parents[2] / "docs" / "self-audit.md").read_text()
    assert monitoring.federation(FEDERATION_EXAMPLE) in example, "docs/self-audit.md: render the example again"


FEDERATION_EXAMPLE = {"ams": "http://prometheus.ams.internal:9090", "sjc": "http://prometheus.sjc.internal:9090"}
