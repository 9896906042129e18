"""The audit's logic: hardware fingerprint comparison, waivers, the fleet report (exit status, what
changed since the last audit, JUnit XML, HTML), testinfra URLs, the verify-results plugin."""

from __future__ import annotations

import copy
import datetime as dt
import io
import json
import os
import subprocess
import sys
from xml.etree import ElementTree as ET

import pytest

from llmfleet.audit import fingerprint, report, waivers
from llmfleet.audit.model import HostResult, Problem
from llmfleet.audit.testinfra import testinfra_url as infra_url
from llmfleet.errors import AuditError
from tests import audit_samples

V100 = {"system": {"vendor": "Supermicro", "product": "SYS-4029GP", "serial": "S1"},
        "cpu": {"model": "Xeon Gold 6148", "count": 80, "sockets": 2}, "memory_kib": 790_000_000,
        "gpus": [{"index": str(i), "name": "Tesla V100-SXM2-32GB", "serial": f"032{i}", "uuid": f"GPU-{i}",
                  "vbios_version": "88.00.98.00.01", "pci.bus_id": f"00000000:{0x1a + i:02X}:00.0",
                  "pcie.link.gen.max": "3", "pcie.link.width.max": "16", "memory.total": "32768"} for i in range(8)],
        "nvlink": {f"GPU{i}": {f"GPU{j}": ("X" if i == j else "NV2") for j in range(8)} for i in range(8)},
        "driver": "580.95.05", "disks": [{"name": "nvme0n1", "size_sectors": "7501476528", "model": "PM983"}]}


def test_an_unchanged_machine_has_no_hardware_drift():
    assert fingerprint.compare("gpu-1", V100, copy.deepcopy(V100)) == []


def test_a_swapped_gpu_a_narrow_link_a_link_down_and_a_lost_dimm_are_named():
    now = copy.deepcopy(V100)
    now["gpus"][3]["serial"] = "0999"
    now["gpus"][3]["uuid"] = "GPU-x"
    now["gpus"][5]["pcie.link.width.max"] = "8"
    now["nvlink"]["GPU1"]["GPU2"] = "SYS"
    now["memory_kib"] = 750_000_000
    found = {p.check: p for p in fingerprint.compare("gpu-1", V100, now)}
    assert set(found) == {"hardware: gpus[3].serial", "hardware: gpus[3].uuid", "hardware: gpus[5].pcie.link.width.max",
                          "hardware: nvlink", "hardware: memory_kib"}
    assert found["hardware: gpus[3].serial"].message == "gpus[3].serial: a swapped GPU"
    assert (found["hardware: gpus[3].serial"].expected, found["hardware: gpus[3].serial"].actual) == ("0323", "0999")
    assert "narrower (an x8 slot or a bad riser)" in found["hardware: gpus[5].pcie.link.width.max"].message
    assert "GPU1-GPU2" in found["hardware: nvlink"].message
    assert all(p.host == "gpu-1" and p.kind == "hardware" for p in found.values())


def test_a_missing_gpu_and_a_changed_driver():
    now = copy.deepcopy(V100)
    now["gpus"] = now["gpus"][:7]
    now["driver"] = "580.105.08"
    checks = {p.check: p.message for p in fingerprint.compare("gpu-1", V100, now)}
    assert checks["hardware: gpus.count"] == "gpus.count: a GPU is missing (fallen off the bus?)"
    assert checks["hardware: driver"] == "driver: a different NVIDIA driver is loaded"


def test_memory_within_tolerance_is_not_drift():
    now = copy.deepcopy(V100)
    now["memory_kib"] = int(V100["memory_kib"] * 0.995)
    assert fingerprint.compare("gpu-1", V100, now) == []


SYSCTL_OP = audit_samples.SYSCTL_OP


def problems():
    from llmfleet.audit.config_drift import changed
    from llmfleet.audit.state_drift import failures

    return [changed(SYSCTL_OP, "lab-c1", "inv"),
            *failures("lab-c1", "verify/test_sysctls.py::test_values",
                      "AssertionError: lab-c1: vm.swappiness: expected 10, actual 60", "deploy lab-c1"),
            *failures("lab-c2", "verify/test_chrony.py::test_running", "AssertionError: chrony not running\n"
                      "assert 'failed' == 'active'", "deploy lab-c2")]


def test_waivers_mark_matching_problems_and_an_expired_one_fails(tmp_path):
    f = tmp_path / "waivers.yml"
    f.write_text("- {check: 'verify/test_sysctls.py::*', hosts: 'lab-c*', reason: 'swappiness trial OPS-1', "
                 "expires: 2026-12-31}\n"
                 "- {check: 'deploy: chrony*', hosts: '*', reason: 'old exception', expires: 2026-01-01}\n")
    ps = problems()
    expired = waivers.apply(ps, waivers.load(f), dt.date(2026, 11, 29))
    assert [p.waived for p in ps] == [None, "swappiness trial OPS-1 (until 2026-12-31)", None]
    assert len(expired) == 1 and expired[0].kind == "waiver"
    assert expired[0].message.startswith("waiver expired on 2026-01-01 (old exception)")
    # the day after its expiry the first waiver no longer holds
    ps = problems()
    waivers.apply(ps, waivers.load(f), dt.date(2027, 1, 1))
    assert not any(p.waived for p in ps)


@pytest.mark.parametrize("content,message", [
    ("- {check: x, hosts: '*', reason: ok, expires: soon}", "waiver 1 (x): expires = 'soon'"),
    ("- {check: x, hosts: '*', expires: 2026-12-31}", "waiver 1 (x): reason: missing"),
    ("- {check: x, hosts: '*', reason: fine, expires: 2026-12-31, owner: me}", "owner = 'me': Extra inputs"),
    ("check: x", "expected a list of waivers"),
])
def test_bad_waiver_files_are_refused(tmp_path, content, message):
    f = tmp_path / "w.yml"
    f.write_text(content)
    with pytest.raises(AuditError, match=None) as exc:
        waivers.load(f)
    assert message in str(exc.value)


def results(ps: list[Problem], unreachable: tuple[str, ...] = ()) -> dict[str, HostResult]:
    out = {n: HostResult(n, checks_run=40) for n in ("lab-c1", "lab-c2", "lab-c3")}
    for p in ps:
        out[p.host].problems.append(p)
    for n in unreachable:
        out[n].reachable = False
        out[n].problems.append(Problem(n, "unreachable", "reachable", "did not answer", "answers",
                                       "no answer: Connection refused", what="SSH", repair="check SSH to the host"))
    return out


def test_the_report_says_clean_drift_or_unreachable_with_the_exit_status():
    clean = report.build("inv", None, results([]), [], None, None, "t0")
    assert clean["exit_status"] == 0 and clean["summary"]["clean"] == 3
    drift = report.build("inv", None, results(problems()), [], None, None, "t1")
    assert drift["exit_status"] == 1 and drift["summary"]["with_drift"] == 2
    assert drift["summary"]["by_kind"]["state"] == 2
    down = report.build("inv", None, results([], unreachable=("lab-c3",)), [], None, None, "t2")
    assert down["exit_status"] == 1 and down["summary"]["unreachable"] == 1 and down["summary"]["clean"] == 2
    ps = problems()
    for p in ps:
        p.waived = "accepted"
    waived = report.build("inv", None, results(ps), [], None, None, "t3")
    assert waived["exit_status"] == 0 and waived["summary"]["waived"] == 3


def test_the_report_says_what_changed_since_the_last_audit(tmp_path):
    first = report.build("inv", None, results(problems()), [], None, None, "t1")
    report.write(first, tmp_path / "20261129T100000000000Z")
    previous, path = report.latest(tmp_path)
    assert previous == json.loads(json.dumps(first))
    now = problems()[1:] + [Problem("lab-c3", "config", "deploy: chrony | restart", "would change")]
    second = report.build("inv", None, results(now), [], previous, path, "t2")
    assert second["changes_since_last"]["resolved"] == ["lab-c1 | config | deploy: sysctls | sysctl drop-in"]
    assert second["changes_since_last"]["new"] == ["lab-c3 | config | deploy: chrony | restart"]
    # an audit of fewer hosts (--limit) or fewer kinds (--skip) resolves nothing it did not look at
    only_c3 = {"lab-c3": results(now)["lab-c3"]}
    third = report.build("inv", ["lab-c3"], only_c3, [], previous, path, "t3")
    assert third["changes_since_last"]["resolved"] == []
    no_config = report.build("inv", None, results([]), [], previous, path, "t4", kinds_run=("hardware", "state"))
    assert no_config["changes_since_last"]["resolved"] == ["lab-c1 | state | verify/test_sysctls.py::test_values",
                                                           "lab-c2 | state | verify/test_chrony.py::test_running"]


def test_junit_says_per_item_what_expected_actual_and_the_repair(tmp_path):
    ps = problems()
    ps[2].waived = "known"
    doc = report.build("inv", None, results(ps, unreachable=("lab-c3",)), [], None, None, "t")
    paths = report.write(doc, tmp_path / "r")
    root = ET.parse(paths["junit"]).getroot()
    suites = {s.get("name"): s for s in root}
    assert suites["lab-c1"].get("failures") == "2"
    assert suites["lab-c2"].get("skipped") == "1" and suites["lab-c3"].get("errors") == "1"
    failure = suites["lab-c1"].find("testcase[@name='verify/test_sysctls.py::test_values']/failure")
    assert failure.get("message") == "vm.swappiness: expected 10, actual 60"
    assert failure.text.splitlines() == ["host: lab-c1", "what: vm.swappiness", "expected: 10", "actual: 60",
                                         "repair: deploy lab-c1"]
    # a check that found two settings differ is two test cases, each named by its setting
    from llmfleet.audit.state_drift import failures

    two = failures("lab-c1", "verify/test_limits.py::test_limits", "AssertionError: lab-c1: limits: vllm soft nofile: "
                   "expected 65536, actual 1024\nlab-c1: limits: vllm hard nofile: expected 65536, actual 1024", "r")
    doc = report.build("inv", None, results(two), [], None, None, "t")
    names = [c.get("name") for c in ET.fromstring(report.junit(doc)).iter("testcase")]
    assert names == ["verify/test_limits.py::test_limits: limits: vllm soft nofile",
                     "verify/test_limits.py::test_limits: limits: vllm hard nofile", "clean (40 checks)",
                     "clean (40 checks)"]


def test_a_verify_failure_is_one_problem_per_setting_that_differs():
    from llmfleet.audit.state_drift import failures

    want = {("vllm", "soft", "nofile"): "65536", ("vllm", "hard", "nofile"): "65536", ("vllm", "soft", "memlock"): "x"}
    got = {("vllm", "soft", "nofile"): None, ("vllm", "hard", "nofile"): "1024", ("vllm", "soft", "memlock"): "x"}
    message = audit_samples.expect_message("lab-c1", "limits (/etc/security/limits.d/90-llmfleet.conf)", want, got)
    assert message.splitlines() == [
        "lab-c1: limits (/etc/security/limits.d/90-llmfleet.conf): vllm soft nofile: expected 65536, actual not set",
        "lab-c1: limits (/etc/security/limits.d/90-llmfleet.conf): vllm hard nofile: expected 65536, actual 1024"]
    # as the audit's pytest plugin records it: pytest's exception line
    ps = failures("lab-c1", "verify/test_limits.py::test_limits", "AssertionError: " + message, "pyinfra x")
    assert [(p.what, p.expected, p.actual) for p in ps] == [
        ("limits (/etc/security/limits.d/90-llmfleet.conf): vllm soft nofile", "65536", "not set"),
        ("limits (/etc/security/limits.d/90-llmfleet.conf): vllm hard nofile", "65536", "1024")]
    assert all(p.host == "lab-c1" and p.kind == "state" and p.repair == "pyinfra x" for p in ps)


@pytest.mark.parametrize("expected,actual,line", [
    ({"vm.swappiness": "1", "vm.max_map_count": "262144"}, {"vm.swappiness": "37", "vm.max_map_count": "262144"},
     "h: sysctls: vm.swappiness: expected 1, actual 37"),
    ({"ActiveState": "active"}, {"ActiveState": "failed", "SubState": "dead"},
     "h: sysctls: ActiveState: expected active, actual failed\nh: sysctls: SubState: expected not set, actual dead"),
    ({"global": {"index-url": "http://m/simple"}}, {"global": {}},
     "h: sysctls: global: index-url: expected http://m/simple, actual not set"),
    (["performance"] * 8, ["performance"] * 7 + ["powersave"],
     "h: sysctls: expected performance ×8, actual performance ×7, powersave"),
    ([], ["NVRM: Xid 79"], "h: sysctls: expected none, actual NVRM: Xid 79"),
    (True, False, "h: sysctls: expected yes, actual no"),
    ("active", "", "h: sysctls: expected active, actual empty"),
    ("a b", " a b ", 'h: sysctls: expected a b, actual " a b "'),
    (200, None, "h: sysctls: expected 200, actual not set"),
])
def test_expect_says_values_as_a_person_reads_them(expected, actual, line):
    assert audit_samples.expect_message("h", "sysctls", expected, actual) == line


def test_expect_passes_equal_values():
    audit_samples.expect_message("h", "sysctls", {"a": "1"}, {"a": "1"}, fails=False)


def test_a_verify_failure_a_deploy_cannot_repair_says_what_to_do_instead():
    from llmfleet.audit.state_drift import repair_for

    assert repair_for("verify/test_limits.py::test_limits", "inv", "h1", ["a=1"]) == \
        "pyinfra inv deploy.py --limit h1 --data a=1"
    assert repair_for("verify/test_gpu_health.py::test_no_xid_errors", "inv", "h1").startswith(
        "a deploy does not repair GPU hardware: look at the GPUs of h1 (nvidia-smi -q;")
    assert repair_for("verify/test_gpu_health.py::test_nouveau_not_loaded", "inv", "h1") == \
        "pyinfra inv deploy.py --limit h1"
    assert repair_for("verify/test_mirrors.py::test_mirrors_answer", "inv", "h1").startswith(
        "a deploy does not make a mirror answer")


def test_the_checks_a_deploy_cannot_repair_exist_in_verify():
    import re

    from llmfleet.audit.state_drift import GPU_HARDWARE, MIRRORS_ANSWER
    from llmfleet.inventory import ROOT

    for check in (*GPU_HARDWARE, MIRRORS_ANSWER):
        path, _, name = check.partition("::")
        assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M), check


def test_a_failure_without_expected_and_actual_keeps_its_first_line():
    from llmfleet.audit.state_drift import failures

    (p,) = failures("lab-c2", "verify/test_chrony.py::test_running",
                    "AssertionError: lab-c2: chrony not running\nassert 'failed' == 'active'", "r")
    assert (p.what, p.why, p.expected, p.actual) == ("test_running", "chrony not running", None, None)
    (p,) = failures("lab-c1", "verify/test_gpu_health.py::test_x",
                    "Failed: lab-c1: vllm_venv: expected a python at /opt/v/bin/python3, actual: none (deploy it)",
                    "r")
    assert (p.what, p.expected, p.actual) == ("vllm_venv", "a python at /opt/v/bin/python3", "none (deploy it)")
    (p, q) = failures("lab-c1", "verify/test_gpu_clocks.py::test_clocks",
                      "AssertionError: lab-c1 GPU 0: clocks: expected 1380, actual 1200\n"
                      "lab-c1 GPU 3: clocks: expected 1380, actual 900", "r")
    assert (p.what, p.actual, q.what, q.actual) == ("GPU 0: clocks", "1200", "GPU 3: clocks", "900")


def test_a_planned_change_names_the_operation_once_with_what_it_manages_and_the_repair():
    from llmfleet.audit.config_drift import changed

    p = changed(SYSCTL_OP, "lab-c1", "inventories/lab.py", ["vllm_enabled=False"])
    assert p.check == "deploy: sysctls | sysctl drop-in"  # the id waivers match: unchanged
    assert (p.what, p.expected, p.actual, p.why) == ("sysctls", "sysctl drop-in",
                                                     "differs: the deploy would change it", "")
    assert p.message == "sysctls | sysctl drop-in: the deploy would change this"
    assert p.message.count("sysctl drop-in") == 1
    assert p.repair == "pyinfra inventories/lab.py deploy.py --limit lab-c1 --data vllm_enabled=False"
    # an operation without a name of its own: pyinfra lists its arguments, and the file it manages is the what
    q = changed(audit_samples.UNNAMED_OP, "lab-c1", "inventories/lab.py")
    assert (q.what, q.expected, q.why) == ("/etc/sysctl.d/90-llmfleet.conf", "files.put", "component sysctls")


def test_every_kind_reads_as_host_what_expected_actual_repair():
    found = {(r["host"], r["kind"]): r for r in report.rows(audit_samples.every_kind())}
    assert set(found) == {("lab-c1", "config"), ("lab-c1", "state"), ("lab-c2", "hardware"), ("lab-c2", "state"),
                          ("lab-c3", "unreachable"), ("lab-c*", "waiver")}
    inv = "inventories/lab.py"
    assert {k: found[k]["repair"] for k in found} == {
        ("lab-c1", "config"): f"pyinfra {inv} deploy.py --limit lab-c1",
        ("lab-c1", "state"): f"pyinfra {inv} deploy.py --limit lab-c1",
        ("lab-c2", "hardware"): f"check the part on lab-c2; if the change is intended, record the hardware again: "
                                f"llmfleet onboard {inv} --limit lab-c2 --restart",
        ("lab-c2", "state"): f"pyinfra {inv} deploy.py --limit lab-c2",
        ("lab-c3", "unreachable"): f"check SSH to the host (pyinfra {inv} exec --limit lab-c3 -- true), then audit "
                                   "again",
        ("lab-c*", "waiver"): "resolve the problems it covered, or give the waiver a later expires: in waivers.yml"}
    assert [found[("lab-c1", "state")][k] for k in ("what", "expected", "actual")] == \
        ["limits (/etc/security/limits.d/90-llmfleet.conf): vllm soft nofile", "65536", "not set"]
    assert [found[("lab-c2", "hardware")][k] for k in ("what", "expected", "actual")] == \
        ["nvlink", "GPU1-GPU2: NV2", "GPU1-GPU2: SYS"]
    assert found[("lab-c2", "state")]["waived"] == "swappiness trial OPS-1 (until 2099-12-31)"
    for r in found.values():
        for v in (r["what"], r["expected"], r["actual"]):
            assert not any(t in v for t in ("{", "}", "('", "['", "None")), r


def test_html_escapes_what_hosts_report(tmp_path):
    ps = [Problem("lab-c1", "state", "x", "<script>alert(1)</script>")]
    page = report.html(report.build("inv", None, results(ps), [], None, None, "t"))
    assert "<script>" not in page and "&lt;script&gt;" in page



SKIPS = [f"{i} verify check(s) skipped: reason {i}" for i in range(1, 10)]


def noted(unreachable: tuple[str, ...] = ()) -> dict:
    """A report of three hosts with the same nine skip notes, lab-c1 with drift and a note of its own."""
    rs = results([Problem("lab-c1", "state", "verify/test_sysctls.py::test_values", "vm.swappiness differs",
                          "10", "60", what="vm.swappiness")], unreachable)
    for r in rs.values():
        r.notes += [] if not r.reachable else SKIPS
    rs["lab-c1"].notes.append("decided at run time, not counted: vllm")
    return report.build("inv", None, rs, [], None, None, "t")


def test_the_page_shows_the_problems_before_any_note():
    page = report.html(noted())
    first_note = min(page.index(n) for n in [*SKIPS, "decided at run time"])
    assert page.index('id="problems"') < page.index("vm.swappiness") < first_note
    assert page.index('id="hosts"') < page.index('id="problems"') < page.index('id="notes"')
    assert "reason 1" not in page[:page.index('id="notes"')]  # the hosts table holds no note


def test_a_note_said_on_three_hosts_is_said_once_with_the_hosts_it_concerns():
    page = report.html(noted())
    assert all(page.count(n) == 1 for n in SKIPS)
    assert page.index("notes on every host") < page.index(SKIPS[0])
    two = report.html(noted(unreachable=("lab-c3",)))
    assert all(two.count(n) == 1 for n in SKIPS) and "notes on every reachable host" in two
    doc = noted()
    del doc["hosts"]["lab-c3"]["notes"][:]
    doc["hosts"]["lab-c3"]["reachable"] = True
    own, shared = report.notes(doc)
    assert shared == [("2 hosts: lab-c1, lab-c2", SKIPS)]
    assert own == {"lab-c1": ["decided at run time, not counted: vllm"]}
    assert noted()["hosts"]["lab-c2"]["notes"] == SKIPS  # the JSON keeps every host's full list


def test_a_note_of_one_host_stays_under_that_host_after_its_problems():
    page = report.html(noted())
    own = page.index("decided at run time, not counted: vllm")
    assert page.count("decided at run time") == 1
    assert page.index("vm.swappiness") < page.index("notes on lab-c1") < own
    assert "notes on lab-c2" not in page and "notes on lab-c3" not in page  # only shared notes: none of its own
    assert report.notes(report.build("inv", None, results([]), [], None, None, "t")) == ({}, [])

def test_testinfra_urls_carry_the_inventory_ssh_settings(tmp_path):
    cfg = tmp_path / "ssh_config"
    url = infra_url("gpu-1", {"ssh_hostname": "10.0.0.5", "ssh_user": "admin", "ssh_port": 2222,
                                  "ssh_key": "/k"}, cfg)
    assert url == f"ssh://gpu-1?ssh_config={cfg}&sudo=true"
    text = cfg.read_text()
    assert "Host gpu-1\n  HostName 10.0.0.5\n  Port 2222\n  User admin\n  IdentityFile /k" in text
    assert f"  ControlPath {tmp_path}/cm-%C\n" in text  # testinfra's ControlMaster=auto needs a path
    assert infra_url("@local", {}, cfg) == "local://"
    assert infra_url("gpu-2", {"ssh_user": "root"}, cfg).endswith("ssh_config=" + str(cfg))
    assert "KexAlgorithms" not in text  # None: ssh's own default list


def test_the_audits_ssh_key_exchange_is_the_settings_and_a_bad_one_stops_the_audit_before_any_host(tmp_path):
    from llmfleet.audit import testinfra
    from llmfleet.schema import defaults

    cfg = tmp_path / "ssh_config"
    default = defaults()["audit_ssh_kex_algorithms"]
    infra_url("gpu-1", {"audit_ssh_kex_algorithms": default}, cfg)
    assert f"Host gpu-1\n  ConnectTimeout 10\n  KexAlgorithms {default}\n" in cfg.read_text()
    # ssh itself takes it: the default list less sntrup761, curve25519 still there
    kex = subprocess.run(["ssh", "-G", "-F", str(cfg), "gpu-1"], capture_output=True, text=True, check=True).stdout
    offered = next(line.split(" ", 1)[1] for line in kex.splitlines() if line.startswith("kexalgorithms "))
    assert "sntrup761" not in offered and "curve25519-sha256" in offered.split(","), offered
    for bad in ("curve25519-sha256\n  ProxyCommand evil", "a b", 7):
        hosts = [{"name": "gpu-1", "data": {}}, {"name": "gpu-2", "data": {"audit_ssh_kex_algorithms": bad}}]
        with pytest.raises(AuditError) as exc:
            testinfra.check(hosts)
        assert str(exc.value).startswith(f"host gpu-2: audit_ssh_kex_algorithms = {bad!r} is not an ssh "
                                         "KexAlgorithms list (fix: ")
        with pytest.raises(AuditError):
            infra_url("gpu-2", hosts[1]["data"], tmp_path / "other")
        assert not (tmp_path / "other").exists()


def test_an_audit_with_a_bad_ssh_setting_asks_no_host(tmp_path, monkeypatch):
    from llmfleet.audit import run

    hosts = [{"name": "gpu-1", "groups": [], "data": {"audit_ssh_kex_algorithms": "x\nProxyCommand y"}}]
    monkeypatch.setattr(run, "read_inventory", lambda *a, **k: hosts)
    monkeypatch.setattr(run.fingerprint, "read", lambda *a, **k: pytest.fail("a host was asked"))
    with pytest.raises(AuditError, match=r"^host gpu-1: audit_ssh_kex_algorithms = 'x\\nProxyCommand y' is not"):
        run.audit("inventories/x.py", None, tmp_path / "state", tmp_path / "out", None)
    assert not (tmp_path / "out").exists()


def test_the_results_plugin_records_outcomes_and_messages(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert 1 == 2, 'h1: thing: expected 1, actual 2'\n"
        "def test_skip(): pytest.skip('not here')\n"
        "def test_figures(record_property): record_property('model_storage', {'read_mbs': 734.4})\n")
    out = tmp_path / "r.jsonl"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "llmfleet.audit.pytest_plugin", str(tmp_path)],
                   env={**os.environ, "LLMFLEET_AUDIT_RESULTS": str(out)}, capture_output=True, cwd=tmp_path)
    rows = {r["nodeid"].split("::")[1]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["test_ok"]["outcome"] == "passed"
    assert rows["test_bad"]["outcome"] == "failed"
    assert rows["test_bad"]["message"].startswith("AssertionError: h1: thing: expected 1, actual 2")
    assert rows["test_skip"]["outcome"] == "skipped" and "not here" in rows["test_skip"]["message"]
    # what a check measured travels with its outcome (the audit and onboarding keep it)
    assert rows["test_figures"]["properties"] == {"model_storage": {"read_mbs": 734.4}}
    assert "properties" not in rows["test_ok"]


def test_the_fingerprint_script_reads_this_machine():
    from llmfleet.remote import python_script

    # the command the fact sends, run here
    fp = json.loads(subprocess.run(["sh", "-c", python_script("audit_fingerprint")], capture_output=True,
                                   text=True, check=True).stdout)
    assert fp["cpu"]["count"] == os.cpu_count() and fp["memory_kib"] > 0
    assert fingerprint.compare("me", fp, fp) == []


def test_disk_free_fact_reads_df_in_kib():
    from llmfleet.facts import DiskFree

    assert DiskFree().process(["258478156 263174212 /"]) == {"free": 258478156 * 1024, "total": 263174212 * 1024,
                                                              "mount": "/"}
    out = subprocess.run(["sh", "-c", DiskFree().command("/data/models/none/here")], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert DiskFree().process(out)["free"] > 0


def test_config_drift_asks_pyinfra_for_a_plan_with_changes():
    from llmfleet.audit.config_drift import dry_run_args

    args = dry_run_args("inventories/lab.py", ["lab-c1", "lab-vm1"], ["vllm_enabled=False"])
    # `-y` would make pyinfra skip computing changes: every host would look clean
    assert "-y" not in args and "--yes" not in args
    assert args[-8:] == ["--dry", "--json", "--limit", "lab-c1", "--limit", "lab-vm1", "--data", "vllm_enabled=False"]


def test_the_terminal_list_has_one_block_per_problem_with_what_expected_actual_and_repair():
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    for part in report.terminal(audit_samples.every_kind()):
        console.print(part, highlight=False)
    text = console.export_text()
    assert ("lab-c1  state  limits (/etc/security/limits.d/90-llmfleet.conf): vllm soft nofile\n"
            "    expected  65536\n"
            "    actual    not set\n"
            "    repair    pyinfra inventories/lab.py deploy.py --limit lab-c1\n"
            "    check     verify/test_limits.py::test_limits\n") in text
    assert ("lab-c1  config  sysctls\n"
            "    expected  sysctl drop-in\n"
            "    actual    differs: the deploy would change it\n"
            "    repair    pyinfra inventories/lab.py deploy.py --limit lab-c1\n") in text
    assert "    waived    swappiness trial OPS-1 (until 2099-12-31)\n" in text
    assert "3 hosts: 0 clean, 2 with drift, 1 unreachable; 5 problems, 1 waived: drift found" in text
    assert not any(t in text for t in ("{'", "('", "['", "None"))


def test_expect_each_names_each_gpu_that_differs_without_reprs():
    from llmfleet.audit.state_drift import failures

    conftest = audit_samples.verify_helpers()
    with pytest.raises(AssertionError) as exc:
        conftest.expect_each("h1", "remapped rows: pending, failure", {"pending": False, "failure": False},
                             {0: {"pending": False, "failure": False}, 3: {"pending": True, "failure": False}})
    assert str(exc.value) == ("h1 GPU 3: remapped rows: pending, failure: expected pending: no; failure: no, "
                              "actual pending: yes; failure: no")
    (p,) = failures("h1", "verify/test_gpu_health.py::test_memory_error_management", f"AssertionError: {exc.value}",
                    "r")
    assert (p.what, p.expected, p.actual) == ("GPU 3: remapped rows: pending, failure", "pending: no; failure: no",
                                              "pending: yes; failure: no")


def test_gpu_check_failures_as_an_h200_checked_as_a_v100_reports_them_read_as_what_expected_actual():
    from llmfleet.audit.state_drift import failures

    conftest = audit_samples.verify_helpers()
    with pytest.raises(AssertionError) as clocks:  # verify/test_gpu_clocks.py's values on the lent H200
        conftest.expect_each("@local", "gpu_profiles.v100_sxm2_32gb_x8.app_clocks (memory, graphics MHz)",
                             (877, 1530), {0: (3201, 1980)})
    with pytest.raises(AssertionError) as pages:
        conftest.expect_each("@local", "retired pages pending (page retirement)", 0, {0: {"error": "Not Supported"}})
    flavour = audit_samples.expect_message(
        "@local", "nvidia_driver_flavour (NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04)",
        "proprietary", "open")
    seen = [(p.what, p.expected, p.actual) for m in (str(clocks.value), str(pages.value), flavour)
            for p in failures("@local", "verify/x.py::y", "AssertionError: " + m, "r")]
    assert seen == [
        ("GPU 0: gpu_profiles.v100_sxm2_32gb_x8.app_clocks (memory, graphics MHz)", "877, 1530", "3201, 1980"),
        ("GPU 0: retired pages pending (page retirement)", "0", "error: Not Supported"),
        ("nvidia_driver_flavour (NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04)",
         "proprietary", "open")]


def test_a_verify_result_is_told_to_its_host_by_the_whole_host_id_not_a_prefix():
    from llmfleet.audit.state_drift import host_of

    tokens = {"ssh://lab-c1": "lab-c1", "ssh://lab-c10": "lab-c10", "local://": "@local"}
    assert host_of("verify/test_sysctls.py::test_sysctls[ssh://lab-c10]", tokens) == "lab-c10"
    assert host_of("verify/test_sysctls.py::test_sysctls[ssh://lab-c1]", tokens) == "lab-c1"
    assert host_of("verify/test_gpu.py::test_x[0-ssh://lab-c1]", tokens) == "lab-c1"
    assert host_of("verify/test_gpu.py::test_x[ssh://lab-c10-0]", tokens) == "lab-c10"
    assert host_of("verify/test_gpu.py::test_x[local://]", tokens) == "@local"
    assert host_of("verify/test_gpu.py::test_x[ssh://lab-c2]", tokens) is None
    assert host_of("verify/conftest.py::setup", tokens) is None


def test_the_verify_part_leaves_no_temporary_folder_behind(tmp_path, monkeypatch, request):
    """The audit's verify part writes an ssh config and each pytest process's results to a folder of
    its own, removed when it returns (91 of them had piled up in this machine's /tmp): here a host
    whose ssh port refuses, so the suite runs for real and reports the host."""
    import shutil
    import tempfile
    from pathlib import Path

    from llmfleet.audit import state_drift

    root = Path(tempfile.mkdtemp(prefix="lf-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.setenv("LLMFLEET_HINTS", str(tmp_path / "hints"))
    inventory = tmp_path / "refusing.py"
    inventory.write_text('hosts = [("refusing", {"ssh_hostname": "127.0.0.1", "ssh_port": 1, '
                         '"vllm_enabled": False})]\n')
    problems, _, _ = state_drift.verify(str(inventory), [{"name": "refusing", "data": {
        "ssh_hostname": "127.0.0.1", "ssh_port": 1, "ssh_user": "root"}}], workers=1, timeout_s=120)
    assert problems and {p.host for p in problems} == {"refusing"}, problems
    assert any("Connection refused" in (p.why or "") for p in problems), [p.why for p in problems[:3]]
    assert list(root.glob("llmfleet-audit-*")) == []


def test_a_long_tmpdir_does_not_keep_the_verify_part_from_reaching_its_hosts(tmp_path, monkeypatch):
    """ssh refuses to run at all when its control socket's path passes 107 bytes ("ControlPath too
    long"): under a long TMPDIR the verify part's folder goes to /tmp, and the host is reached (here
    its port refuses, and the problem says so, not that the path is too long)."""
    import tempfile

    from llmfleet.audit import state_drift

    long_root = tmp_path / ("t" * 60)
    long_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_root))
    monkeypatch.setenv("LLMFLEET_HINTS", str(tmp_path / "hints"))
    assert state_drift.folder_root() == "/tmp"
    assert state_drift.folder_root("/tmp") == "/tmp" and state_drift.folder_root("/var/tmp/x") == "/var/tmp/x"
    inventory = tmp_path / "refusing.py"
    inventory.write_text('hosts = [("refusing", {"ssh_hostname": "127.0.0.1", "ssh_port": 1, '
                         '"vllm_enabled": False})]\n')
    problems, _, _ = state_drift.verify(str(inventory), [{"name": "refusing", "data": {
        "ssh_hostname": "127.0.0.1", "ssh_port": 1, "ssh_user": "root"}}], workers=1, timeout_s=120)
    whys = [p.why or "" for p in problems]
    assert problems and not any("ControlPath too long" in w for w in whys), whys[:3]
    assert any("Connection refused" in w for w in whys), whys[:3]
    assert list(long_root.glob("llmfleet-audit-*")) == []
