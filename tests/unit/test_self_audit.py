"""llmfleet/self_audit.py and `llmfleet audit --from-prometheus`: a real self-audit run (the verify
suite on local://, this machine as the host), its metrics served by the distribution's node exporter
and scraped by the distribution's Prometheus, read back into the audit's own problems. The lab
(tests/integration/test_self_audit.py) proves the same on deployed hosts."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import time
import urllib.request

import pytest
from test_telemetry import free_port, tool

from llmfleet import self_audit
from llmfleet.audit import from_prometheus, metrics
from llmfleet.schema import Settings

HOST = "devbox-1"


def settings(**override) -> Settings:
    return Settings(**({"gpu_profile": None, "vllm_enabled": False} | override))


def test_the_bundle_is_the_same_bytes_for_the_same_code_and_holds_what_a_run_needs():
    first = self_audit.bundle()
    self_audit.bundle.cache_clear()
    assert self_audit.bundle() == first
    names = tarfile.open(fileobj=io.BytesIO(first)).getnames()
    assert "llmfleet/self_audit.py" in names and "verify/conftest.py" in names and "pyproject.toml" in names
    assert "templates/self_audit/llmfleet-self-audit.service.j2" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or n.startswith(("tests/", "group_data/"))]


def test_the_units_run_this_module_with_the_environment_s_python_on_the_interval(tmp_path):
    s = settings(self_audit_interval_s=900, node_exporter_textfile_dir="/srv/textfiles")
    units = self_audit.units(s)
    service, timer = units["llmfleet-self-audit.service"], units["llmfleet-self-audit.timer"]
    assert (f"ExecStart={self_audit.venv_dir(s)}/bin/python3 -m llmfleet.self_audit --settings "
            f"{self_audit.SETTINGS_FILE} --out /srv/textfiles") in service
    assert f"WorkingDirectory={self_audit.current_src(s)}" in service and "IOSchedulingClass=idle" in service
    assert "OnUnitActiveSec=900s" in timer and "WantedBy=timers.target" in timer
    # another package set, another environment: a change never edits the one in use
    assert self_audit.venv_dir(s) != self_audit.venv_dir(settings(self_audit_packages=["pytest==9.2.0"]))


def test_the_host_settings_round_trip_and_carry_the_key_file_s_path_never_the_key(tmp_path):
    key = tmp_path / "api-key"
    key.write_text("sk-very-secret\n")
    key.chmod(0o600)
    s = settings(vllm_api_key_file=str(key))
    doc = json.loads(self_audit.settings_document(HOST, "inventories/prod.py", s))
    assert doc["host"] == HOST and doc["inventory"] == "inventories/prod.py"
    assert Settings.model_validate(doc["data"]) == s
    assert "sk-very-secret" not in json.dumps(doc)


def test_a_deploy_paced_otherwise_writes_the_same_host_settings_and_a_state_setting_changes_them():
    """`--data vllm_max_unavailable=4` (a faster roll) leaves every host's settings file as it was, so
    the next plain deploy changes nothing; a setting of the host's state is in the file."""
    from llmfleet.schema import paces_a_deploy

    plain = self_audit.settings_document(HOST, "inventories/prod.py", settings())
    assert paces_a_deploy() == {"reboot_max_unavailable", "reboot_timeout_s", "vllm_max_unavailable",
                                "vllm_drain_timeout_s"} | {n for n in Settings.model_fields
                                                           if n.startswith(("rollout_", "tune_"))}
    paced = settings(reboot_max_unavailable=3, reboot_timeout_s=60, vllm_max_unavailable=4, vllm_drain_timeout_s=5,
                     rollout_strategy="canary", rollout_step_s=30)
    assert self_audit.settings_document(HOST, "inventories/prod.py", paced) == plain
    assert not paces_a_deploy() & set(json.loads(plain)["data"])
    assert self_audit.settings_document(HOST, "inventories/prod.py", settings(limits_nofile=4096)) != plain


def test_no_verify_check_reads_a_setting_that_paces_a_deploy():
    """The host's self-audit runs verify/ with the pacing settings at their defaults (they are not in
    its settings file): a check that read one would judge the host by a value the deploy did not use."""
    from pathlib import Path

    from llmfleet.schema import paces_a_deploy

    root = Path(self_audit.__file__).resolve().parent.parent / "verify"
    found = [(p.name, name) for p in sorted(root.rglob("*.py")) for name in sorted(paces_a_deploy())
             if name in p.read_text()]
    assert found == []


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One self-audit of this machine (it is no deployed host: the checks find what differs)."""
    tmp = tmp_path_factory.mktemp("self-audit")
    conf = tmp / "settings.json"
    conf.write_text(self_audit.settings_document(HOST, "inventories/prod.py", settings()))
    out = tmp / "textfiles"
    out.mkdir()
    doc = self_audit.run(conf, out, tmp / "no-fingerprint.json", state=tmp / "state")
    return doc, out


def test_a_run_reports_the_verify_suite_s_problems_as_the_control_audit_does(run):
    doc, out = run
    host = doc["hosts"][HOST]
    assert host["checks_run"] > 10 and host["problems"], host
    assert {p["kind"] for p in host["problems"]} == {"state"}
    for p in host["problems"]:
        assert p["host"] == HOST and p["check"].startswith("verify/test_") and "[" not in p["check"], p
        assert p["message"].startswith(f"{HOST}: ") and p["repair"].startswith("pyinfra inventories/prod.py deploy.py")
    assert any("no hardware fingerprint recorded" in n for n in host["notes"])
    text = (out / self_audit.METRICS_FILE).read_text()
    lint = subprocess.run([tool("promtool", "prometheus"), "check", "metrics"], input=text, capture_output=True,
                          text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert 'source="self"' in text and 'host="' not in text  # the scrape target names the host
    assert f'llmfleet_audit_problems{{inventory="inventories/prod.py",source="self",kind="state"}} ' \
           f'{len(host["problems"])}' in text


def _serve(args: list[str], url: str, proc_env=None) -> subprocess.Popen:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=proc_env)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return proc
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.2)


def test_from_prometheus_reads_back_the_same_problems_and_names_a_host_without_an_audit(run, tmp_path):
    doc, out = run
    empty = tmp_path / "empty"
    empty.mkdir()
    ports = [free_port(), free_port()]
    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "node", "static_configs": [
            {"targets": [f"127.0.0.1:{ports[0]}"], "labels": {"host": HOST}},
            {"targets": [f"127.0.0.1:{ports[1]}"], "labels": {"host": "never-audited"}}]}]}))
    procs = []
    try:
        for port, folder in zip(ports, (out, empty), strict=True):
            procs.append(_serve([tool("prometheus-node-exporter", "prometheus-node-exporter"),
                                 f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                                 "--collector.textfile", f"--collector.textfile.directory={folder}"],
                                f"http://127.0.0.1:{port}/metrics"))
        url = f"http://127.0.0.1:{prom_port}"
        procs.append(_serve([tool("prometheus", "prometheus"), f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            f"{url}/-/ready", {**os.environ, "HOME": str(tmp_path)}))
        deadline = time.monotonic() + 60
        while not (from_prometheus.query(url, "llmfleet_audit_problem")
                   and from_prometheus.query(url, 'up{job="node"} == 1')[1:]):
            assert time.monotonic() < deadline, "Prometheus scraped nothing within 60 s"
            time.sleep(0.5)
        results, inventory = from_prometheus.results(url)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=20)
    assert inventory == "inventories/prod.py"
    assert sorted(results) == ["devbox-1", "never-audited"]

    def keyed(problems):
        return sorted((p["host"], p["kind"], p["check"], p["what"], p["expected"], p["actual"], p["message"],
                       p["repair"]) for p in problems)

    ours = [p | {k: p[k] if isinstance(p[k], str) else metrics.show(p[k]) for k in ("expected", "actual")}
            for p in doc["hosts"][HOST]["problems"]]
    assert keyed(p.as_dict() for p in results[HOST].problems) == keyed(ours)
    assert results[HOST].checks_run == doc["hosts"][HOST]["checks_run"] and results[HOST].reachable
    (missing,) = results["never-audited"].problems
    assert missing.kind == "unreachable" and "no audit of this host in Prometheus" in missing.message
