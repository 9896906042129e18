"""Telemetry as data, checked by the real parts where they run here: the audit's metrics read by
the distribution's node exporter (its textfile collector) and linted by `promtool check metrics`;
the host metrics script run as the timer runs it, its output read by the same node exporter; the
rsyslog forwarding file accepted by the distribution's rsyslogd; DCGM's and dcgm-exporter's
packages, unit and counters file."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from llmfleet import addresses, dcgm_exporter, log_forwarding, node_exporter
from llmfleet.audit import metrics
from llmfleet.audit.model import HostResult, Problem
from llmfleet.audit.report import build
from llmfleet.errors import AuditError
from llmfleet.schema import defaults as schema_defaults
from llmfleet.settings import validate

ROOT = Path(__file__).resolve().parents[2]
MODEL = {"name": "llama", "version": "1", "source": "https://models.internal/l.tar", "sha256": "a" * 64,
         "torch_dtype": "float16", "num_attention_heads": 32}


def settings(**override):
    d = schema_defaults()
    return validate("gpu-1", {k: v for k, v in d.items() if not k.startswith("__")} | {"vllm_model": MODEL} | override)


def tool(name: str, package: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: it comes with the Debian package {package} (make sysdeps)"
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_textfiles(folder: Path) -> str:
    """What the distribution's node exporter serves from a textfile folder (only that collector on)."""
    port = free_port()
    proc = subprocess.Popen([tool("prometheus-node-exporter", "prometheus-node-exporter"),
                             f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                             "--collector.textfile", f"--collector.textfile.directory={folder}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    return r.read().decode()
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def audit_doc() -> dict:
    load = {"vllm.service": {"weights_s": 12.5, "at": "2026-12-02T09:00:00+00:00"}}
    c1 = HostResult("lab-c1", checks_run=40, figures={"vllm_weights_load": load})
    c1.problems = [Problem("lab-c1", "config", "deploy: limits", "m"), Problem("lab-c1", "state", "verify/x", "m"),
                   Problem("lab-c1", "state", "verify/y", "m", waived="trial (until 2099-01-01)")]
    c2 = HostResult("lab-c2", reachable=False)
    c2.problems = [Problem("lab-c2", "unreachable", "reachable", "m")]
    expired = [Problem("lab-*", "waiver", "waiver: verify/z", "m")]
    return build("inventories/lab.py", None, {"lab-c1": c1, "lab-c2": c2}, expired, None, None,
                 "2026-12-02T10:00:00+00:00")


def test_audit_metrics_are_what_the_node_exporter_serves(tmp_path):
    written = metrics.write(audit_doc(), tmp_path)
    assert sorted(p.name for p in written) == ["llmfleet_audit_fleet.prom", "llmfleet_audit_lab-c1.prom",
                                               "llmfleet_audit_lab-c2.prom"]
    for path in written:
        lint = subprocess.run([tool("promtool", "prometheus"), "check", "metrics"], input=path.read_text(),
                              capture_output=True, text=True, timeout=60)
        assert lint.returncode == 0, lint.stdout + lint.stderr
    served = scrape_textfiles(tmp_path)
    assert "node_textfile_scrape_error 0" in served
    when = dt.datetime.fromisoformat("2026-12-02T10:00:00+00:00").timestamp()
    base = 'host="lab-c1",inventory="inventories/lab.py"'
    for line in (f'llmfleet_audit_problems{{{base},kind="config"}} 1',
                 f'llmfleet_audit_problems{{{base},kind="state"}} 1',
                 f'llmfleet_audit_problems{{{base},kind="hardware"}} 0', f"llmfleet_audit_waived{{{base}}} 1",
                 f"llmfleet_audit_unreachable{{{base}}} 0", f"llmfleet_audit_checks{{{base}}} 40",
                 'llmfleet_audit_problems{host="lab-c2",inventory="inventories/lab.py",kind="unreachable"} 1',
                 'llmfleet_audit_unreachable{host="lab-c2",inventory="inventories/lab.py"} 1',
                 'llmfleet_audit_waivers_expired{inventory="inventories/lab.py"} 1',
                 f'llmfleet_audit_vllm_weights_load_seconds{{{base},unit="vllm.service"}} 12.5'):
        assert line in served, (line, [s for s in served.splitlines() if s.startswith("llmfleet")])
    stamp = re.search(rf"^llmfleet_audit_timestamp_seconds{{{base}}} (\S+)$", served, re.M)
    assert stamp and float(stamp.group(1)) == when, served


def test_an_audit_of_some_hosts_leaves_the_others_last_results(tmp_path):
    metrics.write(audit_doc(), tmp_path)
    doc = audit_doc()
    del doc["hosts"]["lab-c2"]
    doc["created"] = "2026-12-03T10:00:00+00:00"
    metrics.write(doc, tmp_path)
    c2 = (tmp_path / "llmfleet_audit_lab-c2.prom").read_text()
    day1, day2 = (dt.datetime.fromisoformat(f"2026-12-0{d}T10:00:00+00:00").timestamp() for d in (2, 3))
    assert f"}} {day1:.0f}\n" in c2
    assert f"}} {day2:.0f}\n" in (tmp_path / "llmfleet_audit_lab-c1.prom").read_text()
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_missing_metrics_folder_and_hosts_that_disagree_stop_the_audit(tmp_path):
    with pytest.raises(AuditError, match=r"audit_metrics_dir = '.*/nope': no such folder on this machine \(fix: "):
        metrics.write(audit_doc(), tmp_path / "nope")
    hosts = [{"name": "a", "data": {"audit_metrics_dir": "/x"}}, {"name": "b", "data": {"audit_metrics_dir": "/y"}}]
    with pytest.raises(AuditError, match=r"audit_metrics_dir differs between the audited hosts \(a: /x; b: /y\)"):
        metrics.metrics_dir(hosts)
    assert metrics.metrics_dir([{"name": "a", "data": {"audit_metrics_dir": None}}]) is None


def test_the_host_metrics_script_writes_what_the_node_exporter_serves(tmp_path):
    folder = tmp_path / "textfile"
    folder.mkdir()
    s = settings(node_exporter_textfile_dir=str(folder), vllm_models_dir=str(tmp_path / "models" / "not-yet"))
    script = tmp_path / "llmfleet-host-metrics"
    script.write_text(node_exporter.host_metrics_script(s))
    script.chmod(0o755)
    proc = subprocess.run([str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in folder.iterdir()] == [node_exporter.HOST_METRICS_FILE]
    served = scrape_textfiles(folder)
    assert "node_textfile_scrape_error 0" in served
    free = shutil.disk_usage(tmp_path).free
    found = re.search(r'llmfleet_models_dir_avail_bytes\{path="(.*?)"\} (\S+)', served)
    assert found and found.group(1) == str(tmp_path / "models" / "not-yet"), served
    assert abs(float(found.group(2)) - free) < 1e9  # the filesystem of its nearest existing parent
    # chrony: its offset where chronyd answers, and "not synchronised" where it does not (this machine)
    assert re.search(r"^llmfleet_chrony_synchronised [01]$", served, re.M), served


def test_the_forwarding_file_is_accepted_by_rsyslogd_and_selects_the_units(tmp_path):
    s = settings(log_forward_target="logs.internal:6514", log_forward_retry_s=5)
    conf = log_forwarding.forward_config(s, "gpu-1")
    assert conf is not None
    path = tmp_path / "forward.conf"
    path.write_text(conf)
    check = subprocess.run([tool("rsyslogd", "rsyslog"), "-N1", "-f", str(path)], capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert 'target="logs.internal" port="6514" protocol="tcp"' in conf and 'action.resumeInterval="5"' in conf
    assert 'queue.type="LinkedList" queue.filename="llmfleet-forward"' in conf and "queue.saveOnShutdown" in conf
    regex = log_forwarding.unit_regex(s.log_forward_units)
    for unit in ("vllm.service", "vllm-a.service", "nvidia-dcgm-exporter.service", "llmfleet-host-metrics.service"):
        assert re.fullmatch(regex.strip("^$"), unit), unit
    for unit in ("ssh.service", "vllmx.service", "cron.service"):
        assert not re.fullmatch(regex.strip("^$"), unit), unit
    assert log_forwarding.forward_config(settings(), "gpu-1") is None  # log_forward_target None: nothing


def test_dcgm_packages_are_pinned_for_the_cuda_major_with_the_exporter_package():
    assert dcgm_exporter.dcgm_packages(settings()) == {
        "datacenter-gpu-manager-4-core": "1:4.6.0-1", "datacenter-gpu-manager-4-cuda12": "1:4.6.0-1",
        "datacenter-gpu-manager-exporter": "4.8.3.002-1"}
    archive = {"url": "https://mirror.internal/dcgm_exporter-linux-x86-64-4.8.3.002.tar.gz", "sha256": "b" * 64,
               "version": "4.8.3"}
    s = settings(dcgm_exporter_package=None, dcgm_exporter_archive=archive, cuda_toolkit_version="13.0",
                 gpu_profile="h200_141gb_x1", vllm_flags={"dtype": "half"}, nvidia_driver_flavour="open")
    assert dcgm_exporter.dcgm_packages(s) == {"datacenter-gpu-manager-4-core": "1:4.6.0-1",
                                          "datacenter-gpu-manager-4-cuda13": "1:4.6.0-1"}
    assert dcgm_exporter.exporter_command(s) == ["/opt/llmfleet/dcgm-exporter/4.8.3/usr/bin/dcgm-exporter", "-f",
                                             "/etc/dcgm-exporter/llmfleet-counters.csv", "-a", "0.0.0.0:9400",
                                             "-r", "localhost:5555", "-c", "30000"]


def test_the_exporter_unit_uses_dcgms_host_engine_and_the_counters_cover_the_failure_fields():
    s = settings()
    unit = dcgm_exporter.exporter_unit(s)
    assert "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/llmfleet-counters.csv -a 0.0.0.0:9400 " \
           "-r localhost:5555 -c 30000\n" in unit
    assert "Wants=nvidia-dcgm.service\nAfter=nvidia-dcgm.service\n" in unit and "StandardOutput" not in unit
    rows = [line.split(", ") for line in dcgm_exporter.counters_csv(s).splitlines()
            if line and not line.startswith("#")]
    fields = {r[0] for r in rows}
    assert all(len(r) == 3 and r[1] in ("gauge", "counter") for r in rows), rows
    # Xid, ECC single and double bit, row remapping, NVLink errors, throttle reasons, power,
    # temperatures, clocks, memory used, PCIe replays: each exported
    for field in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                  "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING",
                  "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                  "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
                  "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_SM_CLOCK",
                  "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"):
        assert field in fields, field


def test_node_exporter_listens_where_group_data_says():
    s = settings(node_exporter_address="10.1.2.3")
    assert node_exporter.node_exporter_args(s) == ("--web.listen-address=10.1.2.3:9100 "
                                               "--collector.textfile.directory=/var/lib/prometheus/node-exporter")
    assert addresses.local_url("0.0.0.0", 9100) == "http://127.0.0.1:9100/metrics"
    assert addresses.local_url("10.1.2.3", 9400) == "http://10.1.2.3:9400/metrics"
