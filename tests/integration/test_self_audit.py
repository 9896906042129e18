"""The hosts' own audits on the lab (llmfleet/self_audit.py, deployed by the session's first deploy):
a hand-made drift is named alike by the control machine's audit, by the host's self-audit and by
`llmfleet audit --from-prometheus` (the lab's real Prometheus, scraping the host's real node
exporter), and a repair deploy clears all three; a host whose self-audit stops is flagged by
AuditTooOld in the lab's Prometheus (group_data/lab.py: a run a minute, an audit older than 144 s
is too old); the timer comes back after a reboot."""

from __future__ import annotations

import datetime as dt
import json
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from harness import BIN, LAB_ENV, api_key, lab_ssh, run, state
from test_monitoring import api, prometheus, wait

from llmfleet import self_audit, vllm
from llmfleet.lab import poller

pytestmark = pytest.mark.lab_stage("as made")
DRIFTED = "lab-c2"
REBOOTED = "lab-c3"
STOPPED = "lab-c1"  # its self-audit timer stops when this module starts (AuditTooOld)
SERVICE = f"{self_audit.UNIT}.service"
TIMER = f"{self_audit.UNIT}.timer"
# What is changed by hand on a managed host, beside the limit and chrony above: a secret made
# world-readable, a managed file given to another owner, a foreign sysctl drop-in that overrides a
# managed key at the next boot, the served model's `current` link removed, a managed unit edited,
# and a drop-in added beside a managed unit.
BY_HAND = [
    f"chmod 644 {vllm.API_KEY_FILE}",
    "chown nobody /etc/sysctl.d/90-llmfleet.conf",
    "printf 'vm.swappiness = 60\\n' > /etc/sysctl.d/95-local.conf",
    "rm /data/models/tiny-llama/current",
    "echo '# tuned by hand' >> /etc/systemd/system/llmfleet-thp.service",
    "mkdir -p /etc/systemd/system/llmfleet-host-metrics.service.d && "
    "printf '[Service]\\nNice=5\\n' > /etc/systemd/system/llmfleet-host-metrics.service.d/override.conf",
]
# How both audits name each of them: (what, expected, actual), each a part of the problem's text.
MANAGED_DRIFT = [
    (f"managed file: {vllm.API_KEY_FILE} (vllm: API key file", "0600", "0644"),
    ("managed file: /etc/sysctl.d/90-llmfleet.conf (sysctl drop-in): user", "root", "nobody"),
    ("drop-in override: /etc/sysctl.d/95-local.conf line 1 overrides /etc/sysctl.d/90-llmfleet.conf: vm.swappiness",
     "1", "60"),
    ("managed file: /data/models/tiny-llama/current (vllm: model link `current` (vllm_model)): kind", "link",
     "missing"),
    ("managed file: /etc/systemd/system/llmfleet-thp.service (boot unit sets transparent huge pages): content",
     "sha256 ", "sha256 "),
    ("drop-in override: /etc/systemd/system/llmfleet-host-metrics.service.d/override.conf line 2 overrides "
     "/etc/systemd/system/llmfleet-host-metrics.service: Service.Nice", "not set", "5"),
]


@pytest.fixture(scope="module", autouse=True)
def self_audit_stopped(deployed):
    """STOPPED's self-audit timer, stopped as this module starts: AuditTooOld needs the threshold's
    144 s to pass after the last run, which the drift test below spends on another host instead of
    the alert's test waiting them out. Started again when the module ends."""
    lab_ssh(STOPPED, f"sudo systemctl stop {TIMER}")
    yield time.monotonic()
    lab_ssh(STOPPED, f"sudo systemctl start {TIMER}")


def self_audited(host: str) -> dict:
    """A self-audit run now on the host (the service its timer starts), and the report it left."""
    lab_ssh(host, f"sudo systemctl start {SERVICE}", timeout=600)
    return json.loads(lab_ssh(host, f"sudo cat {self_audit.STATE_DIR}/last.json").stdout)


def keyed(problems) -> list[tuple]:
    """What a person reads of a problem, as both audits must say it: host, kind, check, what, expected, actual."""
    def text(v):
        return v if isinstance(v, str) or v is None else json.dumps(v, sort_keys=True)

    return sorted((p["host"], p["kind"], p["check"], p["what"], text(p["expected"]), text(p["actual"]))
                  for p in problems)


def control_audit(tmp_path: Path, state_dir: Path) -> list[dict]:
    out = tmp_path / f"reports-{time.monotonic_ns()}"
    run(str(BIN / "llmfleet"), "audit", "inventories/lab.py", "--limit", DRIFTED, "--skip", "config",
        "--state-dir", str(state_dir), "--out-dir", str(out), check=False)
    (report,) = out.glob("*/audit.json")
    return [p for h in json.loads(report.read_text())["hosts"].values() for p in h["problems"]]


def from_prometheus(tmp_path: Path, since: float) -> list[dict]:
    """`llmfleet audit --from-prometheus` once Prometheus holds the host's self-audit of `since` or later."""
    def fresh():
        found = api("query", query=f'llmfleet_audit_timestamp_seconds{{host="{DRIFTED}",source="self"}}')["result"]
        return found and float(found[0]["value"][1]) >= since - 1

    wait(f"{DRIFTED}'s self-audit in Prometheus", fresh, 60)
    out = tmp_path / f"prom-{time.monotonic_ns()}"
    proc = run(str(BIN / "llmfleet"), "audit", "--from-prometheus", prometheus(), "--limit", DRIFTED, "--out-dir",
               str(out), check=False)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    (report,) = out.glob("*/audit.json")
    doc = json.loads(report.read_text())
    assert doc["source"] == prometheus() and list(doc["hosts"]) == [DRIFTED]
    return doc["hosts"][DRIFTED]["problems"]


def test_a_drift_is_named_alike_by_the_control_audit_the_self_audit_and_prometheus_and_a_deploy_clears_them(
        lab, deployed, tmp_path):
    # hardware: the fingerprint recorded at onboarding, as if the board had since been swapped (the deploy
    # copies the record to the host); state: a limit, a unit and a config file changed by hand
    fact = run(str(BIN / "pyinfra"), "inventories/lab.py", "fact", "llmfleet.facts.HardwareFingerprint", "--json",
               "-y", "--limit", DRIFTED).stdout
    recorded = json.loads(fact[fact.index("{"):])["llmfleet.facts.HardwareFingerprint"][DRIFTED]
    real = json.loads(json.dumps(recorded))
    recorded["cpu"]["model"] = "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"
    state_dir = tmp_path / "state"
    record = state_dir / "hosts" / DRIFTED / "fingerprint.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps(recorded))
    run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", DRIFTED,
        LLMFLEET_STATE_DIR=str(state_dir))
    lab_ssh(DRIFTED, "sudo sed -i 's/nofile 65536/nofile 2048/' /etc/security/limits.d/90-llmfleet.conf"
                     " && sudo systemctl stop chrony && "
                     + " && ".join(f"sudo sh -c {shlex.quote(c)}" for c in BY_HAND))
    try:
        control = control_audit(tmp_path, state_dir)
        before = time.time()
        own = self_audited(DRIFTED)["hosts"][DRIFTED]["problems"]
        gathered = from_prometheus(tmp_path, before)
        print("control:", keyed(control), "\nself:", keyed(own))
        assert {p["kind"] for p in control} == {"state", "hardware"}, control
        assert keyed(own) == keyed(control)
        assert keyed(gathered) == keyed(control)
        whats = {p["what"] for p in own}
        assert "cpu.model" in whats and "chrony service" in whats, whats
        assert any("vllm soft nofile" in w for w in whats), whats
        named = {(p["what"], p["expected"], p["actual"]) for p in own}
        for want in MANAGED_DRIFT:
            assert any(all(part in str(f) for part, f in zip(want, n, strict=True)) for n in named), (want, named)
        assert api_key() not in json.dumps(control + own + gathered)  # a secret is named, never shown
    finally:
        record.write_text(json.dumps(real))  # the hardware as it is
        run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", DRIFTED,
            LLMFLEET_STATE_DIR=str(state_dir))
    assert control_audit(tmp_path, state_dir) == []
    before = time.time()
    assert self_audited(DRIFTED)["hosts"][DRIFTED]["problems"] == []
    assert from_prometheus(tmp_path, before) == []
    # the repair is whole: a second deploy changes nothing (the commented-out line stays so)
    plan = json.loads(run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "--dry", "--json", "--limit",
                          DRIFTED, LLMFLEET_STATE_DIR=str(state_dir)).stdout)["plan"]
    assert {p["name"] for p in plan if p["hosts_with_change"] or p["hosts_with_conditional_change"]} == set()
    assert "# llmfleet: vm.swappiness" in lab_ssh(DRIFTED, "cat /etc/sysctl.d/95-local.conf").stdout


def test_a_host_whose_self_audit_stops_is_flagged_by_audit_too_old(lab, deployed, self_audit_stopped):
    host, t0 = STOPPED, self_audit_stopped
    assert lab_ssh(host, f"systemctl is-active {TIMER}", check=False).stdout.strip() == "inactive"
    try:
        def firing():
            return [a for a in api("alerts")["alerts"] if a["labels"]["alertname"] == "AuditTooOld"
                    and a["labels"].get("host") == host and a["labels"].get("source") == "self"
                    and a["state"] == "firing"]

        (alert,) = wait(f"AuditTooOld firing for {host}", firing, 240, every=3)
        print(f"AuditTooOld firing {time.monotonic() - t0:.0f} s after {TIMER} stopped on {host}")
        assert "no self-audit of lab-c1 within 0.04 h" in alert["annotations"]["summary"]
        others = {a["labels"].get("host") for a in api("alerts")["alerts"]
                  if a["labels"]["alertname"] == "AuditTooOld" and a["labels"].get("source") == "self"}
        assert others == {host}, others  # the hosts whose timer runs are not flagged
    finally:
        lab_ssh(host, f"sudo systemctl start {TIMER}")


def test_the_self_audit_timer_comes_back_after_a_reboot(lab, deployed):
    boot = lab_ssh(REBOOTED, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    lab_ssh(REBOOTED, "sudo systemctl reboot", check=False)

    def back():
        try:
            proc = lab_ssh(REBOOTED, "cat /proc/sys/kernel/random/boot_id; systemctl is-active "
                                     "llmfleet-self-audit.timer", check=False, timeout=30)
        except subprocess.TimeoutExpired:  # still booting
            return False
        lines = proc.stdout.split()
        return proc.returncode == 0 and lines[:1] != [boot] and lines[1:] == ["active"]

    wait(f"{REBOOTED} booted again with its self-audit timer active", back, 240, every=3)
    started = float(lab_ssh(REBOOTED, "date +%s").stdout)

    def ran_since_boot():
        shown = lab_ssh(REBOOTED, f"sudo cat {self_audit.STATE_DIR}/last.json", check=False).stdout
        return bool(shown) and _when(json.loads(shown)["created"]) >= started - 5

    wait(f"a self-audit of {REBOOTED} after its boot", ran_since_boot, 60 + 120, every=5)  # the fleet's first run
    # serving again, for the modules after this one
    api_key = (Path(LAB_ENV["LLMFLEET_LAB_DIR"]) / "api-key").read_text().strip()
    address = state()["hosts"][REBOOTED]["address"]
    wait(f"{REBOOTED}: vLLM serving again", lambda: poller.complete(address, api_key, "tiny-llama") == 1, 300, every=2)


def _when(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()
