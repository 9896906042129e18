"""Telemetry on the lab with real parts: the distribution's Prometheus on this machine (started by
`lab up`, like the lab's other services) loads exactly what `llmfleet monitoring` renders for the
lab inventory and scrapes every host's node exporter, every vLLM server and the audits' node
exporter; a vLLM server stopped on a host fires its alert there; an audit with drift shows up as
`llmfleet_audit_*` series; a line the vLLM unit logs reaches the lab's syslog receiver (rsyslog),
and lines logged while the receiver is down arrive once it is back. The session's first deploy
installed the exporters and the forwarding (they are in deploy.py); the lab's group data makes
scrapes, evaluations and `for:` a matter of seconds. (GPU exporters need a GPU: tests/ops and
tests/unit cover them.)"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
from harness import BIN, GATEWAY, LAB_ENV, lab_ssh, llmfleet, run, serving_containers, state

from llmfleet.lab import poller
from llmfleet.lab.config import LabPaths
from llmfleet.lab.services import prometheus_config_dir, syslog_received

pytestmark = pytest.mark.lab_stage("as made")
PATHS = LabPaths(Path(LAB_ENV["LLMFLEET_LAB_DIR"]), LabPaths.from_env().cache_dir)


def prometheus() -> str:
    svc = state()["services"]["prometheus"]
    return f"http://{svc['address']}:{svc['port']}"


def api(path: str, **params: str) -> dict:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{prometheus()}/api/v1/{path}{query}", timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return doc["data"]


def wait(what: str, check, timeout: float, every: float = 1.0):
    """check() until it returns something true; fail with what was last seen after timeout s."""
    deadline, seen = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        seen = check()
        if seen:
            return seen
        time.sleep(every)
    pytest.fail(f"{what}: not within {timeout} s (last seen: {seen!r})")


def targets() -> list[dict]:
    return [{"job": t["labels"]["job"], "host": t["labels"].get("host", ""), "health": t["health"],
             "error": t["lastError"]} for t in api("targets")["activeTargets"]]


def containers() -> dict[str, str]:
    return serving_containers()


def stopped() -> str:
    """The host whose vLLM server is stopped (and started again) here: the last container."""
    return max(containers())


@pytest.fixture(scope="module")
def scraped(lab, deployed):
    """Every target up (vLLM servers the earlier modules restarted may still be loading); at the end
    of the module, the vLLM server stopped here serves again, for the modules after this one."""
    wait("every lab target up", lambda: all(t["health"] == "up" for t in targets()) and targets(), 240, every=2)
    yield targets()
    api_key = (Path(LAB_ENV["LLMFLEET_LAB_DIR"]) / "api-key").read_text().strip()
    wait(f"{stopped()}: vLLM serving again",
         lambda: poller.complete(containers()[stopped()], api_key, "tiny-llama") == 1, 300, every=2)


def test_prometheus_loads_exactly_what_llmfleet_monitoring_renders(lab, scraped, tmp_path):
    run(str(BIN / "llmfleet"), "monitoring", "--inventory", "inventories/lab.py", "--out", str(tmp_path))
    loaded = prometheus_config_dir(PATHS)
    mine = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert {p.name: p.read_text() for p in loaded.iterdir() if not p.name.startswith(".")} == mine
    check = run("promtool", "check", "config", str(loaded / "prometheus.yml"))
    assert "SUCCESS" in check.stdout + check.stderr
    rules = api("rules")["groups"]
    assert sorted(g["file"].rsplit("/", 1)[-1] for g in rules) == sorted(n for n in mine if n.endswith("-alerts.yml"))
    assert {r["name"] for g in rules for r in g["rules"]} >= {"VllmDown", "NodeExporterDown", "ClockOffsetHigh",
                                                              "AuditProblems", "AuditTooOld"}


def test_every_lab_target_is_up(scraped):
    hosts = sorted(state()["hosts"])
    assert sorted((t["job"], t["host"]) for t in scraped) == sorted(
        [("node", h) for h in hosts] + [("vllm", h) for h in containers()] + [("gateway", GATEWAY)]
        + [("llmfleet_audit", "")])
    up = {(r["metric"]["job"], r["metric"].get("host", "")): r["value"][1]
          for r in api("query", query="up")["result"]}
    assert set(up.values()) == {"1"}, up
    # llmfleet's host metrics, through each host's node exporter
    synced = api("query", query="llmfleet_chrony_synchronised")["result"]
    assert sorted(r["metric"]["host"] for r in synced) == hosts


def test_a_stopped_vllm_server_fires_its_alert(scraped):
    host = stopped()
    lab_ssh(host, "sudo systemctl stop vllm.service")
    t0 = time.monotonic()
    try:
        def firing():
            return [a for a in api("alerts")["alerts"] if a["labels"]["alertname"] == "VllmDown"
                    and a["labels"].get("host") == host and a["state"] == "firing"]

        (alert,) = wait(f"VllmDown firing for {host}", firing, 90)
        print(f"VllmDown firing {time.monotonic() - t0:.0f} s after vllm.service stopped on {host}")
        assert alert["annotations"]["summary"] == f"vLLM on {host} does not answer /metrics"
        assert alert["labels"]["severity"] == "critical" and alert["labels"]["group"] == "lab_containers"
    finally:
        lab_ssh(host, "sudo systemctl start vllm.service")  # ready again by the module's end (`scraped`)


def test_an_audit_with_drift_shows_up_as_llmfleet_audit_series(lab, scraped, tmp_path):
    host = "lab-c2"
    fact = run(str(BIN / "pyinfra"), "inventories/lab.py", "fact", "llmfleet.facts.HardwareFingerprint", "--json",
               "-y", "--limit", host).stdout
    recorded = json.loads(fact[fact.index("{"):])["llmfleet.facts.HardwareFingerprint"][host]  # {fact: {host: value}}
    recorded["cpu"]["model"] = "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"  # as if the board had been swapped
    record = tmp_path / "state" / "hosts" / host / "fingerprint.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps(recorded))
    before = time.time()
    proc = run(str(BIN / "llmfleet"), "audit", "inventories/lab.py", "--limit", host, "--skip", "config", "--skip",
               "state", "--state-dir", str(tmp_path / "state"), "--out-dir", str(tmp_path / "reports"), check=False)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "metrics of 1 host(s) written to" in proc.stderr
    # asked at once, `llmfleet lab prometheus` answers as of a scrape and an evaluation after the audit
    shown = json.loads(run(str(BIN / "llmfleet"), "lab", "prometheus", "--json").stdout)
    assert shown["settled"], shown
    # pending (the lab's `for:` is 6 s) or firing; the control machine's (the hosts' own: test_self_audit.py)
    active = {(a["name"], a["host"]) for a in shown["alerts"] if a["source"] != "self"}
    assert ("AuditProblems", host) in active, shown["alerts"]
    assert not [a for a in active if a[0] == "AuditTooOld"], shown["alerts"]  # absent() resolved by this audit

    def series():
        found = {r["metric"]["__name__"] + "/" + r["metric"].get("kind", ""): float(r["value"][1]) for r in
                 api("query", query=f'{{__name__=~"llmfleet_audit_.*",host="{host}",source!="self"}}')["result"]}
        return found if found.get("llmfleet_audit_timestamp_seconds/", 0) >= before - 1 else None

    found = wait(f"this audit's series for {host} in Prometheus", series, 30)
    assert found["llmfleet_audit_problems/hardware"] == 1 and found["llmfleet_audit_unreachable/"] == 0, found
    assert found["llmfleet_audit_problems/config"] == found["llmfleet_audit_problems/state"] == 0, found
    wait(f"AuditProblems firing for {host}", lambda: [a for a in api("alerts")["alerts"] if a["state"] == "firing"
                                                     and a["labels"]["alertname"] == "AuditProblems"
                                                     and a["labels"].get("host") == host
                                                     and a["labels"].get("source") != "self"], 30)


def test_vllm_unit_lines_reach_the_receiver_and_those_logged_while_it_is_down_follow(scraped):
    host, address = next(iter(containers().items()))
    received = syslog_received(PATHS)

    def log_marker(tag: str) -> str:
        marker = f"llmfleet-{tag}-{uuid.uuid4().hex[:12]}"
        try:  # vLLM's access log (uvicorn) logs the request line, 404 and all
            urllib.request.urlopen(f"http://{address}:8000/{marker}", timeout=10)
        except urllib.error.HTTPError as exc:
            assert exc.code == 404, exc
        return marker

    def arrived(markers: list[str]):
        lines = [ln for ln in received.read_text(errors="replace").splitlines() if any(m in ln for m in markers)]
        return lines if len({m for m in markers if any(m in ln for ln in lines)}) == len(markers) else None

    other = f"llmfleet-other-{uuid.uuid4().hex[:12]}"
    lab_ssh(host, f"logger {other}")  # a login session's line: not a unit of log_forward_units, stays on the host
    first = log_marker("up")
    (line,) = wait("a vLLM access line at the lab's syslog receiver", lambda: arrived([first]), 30)
    assert line.startswith(f"{host} ") and f"GET /{first} HTTP/1.1" in line, line

    llmfleet("lab", "service", "stop", "syslog")
    try:
        during = []
        for _ in range(3):
            during.append(log_marker("down"))
            time.sleep(1)
        time.sleep(3)  # rsyslog has found the receiver gone and queues (it retries every log_forward_retry_s)
        assert arrived(during[:1]) is None
    finally:
        llmfleet("lab", "service", "start", "syslog")
    t0 = time.monotonic()
    lines = wait("the lines logged while the receiver was down", lambda: arrived(during), 60)
    print(f"{len(lines)} lines logged while the receiver was down arrived {time.monotonic() - t0:.0f} s after it "
          "came back")
    assert all(ln.startswith(f"{host} ") for ln in lines), lines
    assert arrived([other]) is None, f"{other} (logger in a login session) was forwarded"
    assert other in lab_ssh(host, f"sudo journalctl -q -b --grep {other}").stdout  # it was logged, on the host
