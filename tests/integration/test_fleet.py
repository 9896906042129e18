"""Fleet operations on the lab: onboarding a fresh host (interrupted and resumed) to a clean audit,
hardware drift against its recorded fingerprint, and drift injected by hand on two container hosts
found exactly, waived, reported unreachable, and cleared by a deploy. (It adds lab-c4 to the lab: stage
"grown", after the modules that expect the lab as `lab up` made it.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from harness import BIN, ROOT, deploy_at_once, env, lab_ssh, llmfleet, run, state

NEW = "lab-c4"
pytestmark = pytest.mark.lab_stage("grown")


@pytest.fixture(scope="module")
def fleet_dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet")
    return base / "state", base / "reports"


def onboard(state_dir, out_dir, *extra, check=False):
    return run(str(BIN / "llmfleet"), "onboard", "inventories/lab.py", "--limit", NEW, "--state-dir", str(state_dir),
               "--out-dir", str(out_dir), *extra, check=check, timeout=2400)


def audit(state_dir, out_dir, *extra):
    return run(str(BIN / "llmfleet"), "audit", "inventories/lab.py", "--state-dir", str(state_dir),
               "--out-dir", str(out_dir), *extra, check=False, timeout=1800)


def latest_report(out_dir) -> dict:
    return json.loads(sorted(out_dir.glob("*/audit.json"))[-1].read_text())


def test_onboarding_a_fresh_host_is_resumable_and_ends_in_a_clean_audit(lab, deployed, fleet_dirs):
    state_dir, out_dir = fleet_dirs
    llmfleet("lab", "up", "--hosts", "4", "--vm")
    assert NEW in state()["hosts"]
    progress = state_dir / "hosts" / NEW / "onboarding.json"
    # interrupted for real (Ctrl-C) while the deploy runs: the stages done so far are kept. SIGINT as
    # a terminal delivers it: to the process group, with its default action (a test run started in
    # the background, as `nohup make test &`, inherits SIGINT ignored, and so would the command)
    proc = subprocess.Popen([str(BIN / "llmfleet"), "onboard", "inventories/lab.py", "--limit", NEW,
                             "--state-dir", str(state_dir), "--out-dir", str(out_dir)], cwd=ROOT, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600
    while not (progress.is_file() and "preflight" in json.loads(progress.read_text())["stages"]):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
        time.sleep(1)
    # at once: the deploy is starting (pyinfra takes seconds to load and connect), so nothing on the
    # host is cut half-way (an interrupted dpkg would need repair by hand)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0, out[-2000:]
    assert f"{NEW}: interrupted during deploy; nothing of it is recorded" in " ".join(out.split()), out[-2000:]
    # the fresh image has no fio: the preflight installed it (mirrors, then fio) before it measured the storage
    assert f"{NEW}: preflight: fio is not installed: installing it" in " ".join(out.split()), out[-2000:]
    done = json.loads(progress.read_text())
    assert list(done["stages"]) == ["preflight"] and "onboarded" not in done
    # run again: it continues from the deploy, and ends onboarded with a clean first audit
    p = onboard(state_dir, out_dir)
    out = " ".join(p.stdout.split())
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-3000:]
    assert f"{NEW}: preflight: done on" in out and "skipped" in out
    for stage in ("deploy", "verify", "acceptance", "record", "audit"):
        assert f"{NEW}: {stage}: done" in out, out[-3000:]
    assert f"{NEW}: onboarded" in out
    done = json.loads(progress.read_text())
    assert done["onboarded"] and done["stages"]["verify"]["checks"] > 10
    assert done["stages"]["acceptance"]["p95_e2e_ms"] is not None
    # the acceptance checks ran in the acceptance stage: the GPU ones (interconnect 4, DCGM's long diagnostic,
    # the burn-in) said why they skip on a host without GPUs; the model storage was measured (here and in the
    # preflight, which installed fio first: the image has none) and kept with the weights load time
    assert done["stages"]["acceptance"]["acceptance_notes"] == [
        "6 verify check(s) skipped: gpu_profile is None in this host's data: a host without GPUs"]
    assert done["stages"]["preflight"]["model_storage"]["read_mbs"] > 0
    kept = json.loads((state_dir / "hosts" / NEW / "acceptance.json").read_text())["figures"]
    assert kept["model_storage"]["read_mbs"] > 0 and kept["vllm_weights_load"]["vllm.service"]["weights_s"] >= 0
    assert (state_dir / "hosts" / NEW / "fingerprint.json").is_file()
    # a third run has nothing to do
    p = onboard(state_dir, out_dir)
    assert p.returncode == 0 and "nothing to do" in p.stdout


def test_a_changed_part_is_hardware_drift(lab, fleet_dirs):
    state_dir, out_dir = fleet_dirs
    fp_file = state_dir / "hosts" / NEW / "fingerprint.json"
    original = fp_file.read_text()
    fp = json.loads(original)
    fp["cpu"]["model"] = "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"  # as if the board had been swapped
    fp_file.write_text(json.dumps(fp))
    try:
        p = audit(state_dir, out_dir, "--limit", NEW, "--skip", "config", "--skip", "state")
        assert p.returncode == 1, p.stdout[-3000:]
        doc = latest_report(out_dir)
        (problem,) = doc["hosts"][NEW]["problems"]
        assert problem["check"] == "hardware: cpu.model" and problem["kind"] == "hardware"
        assert problem["expected"] == "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"
    finally:
        fp_file.write_text(original)


# drift by hand: (host, command, a check id that must be reported for that host). The audit of
# the container hosts (`--limit lab_containers`): what it classifies and reports needs no kernel of
# its own, and the VM's kernel-level drift is found by the same verify checks in test_baseline.py's
# break-and-repair (the audit runs them); an audit round with the emulated VM cost minutes.
DRIFT = [
    ("lab-c1", "sudo sed -i 's/nofile 65536/nofile 1024/' /etc/security/limits.d/90-llmfleet.conf",
     "verify/test_limits.py::"),
    ("lab-c1", "sudo sed -i 's/^Restart=on-failure/Restart=always/' /etc/systemd/system/vllm.service",
     "deploy: vllm"),
    ("lab-c2", "sudo systemctl stop chrony", "verify/test_chrony.py::test_chrony_synchronised"),
]


def test_drift_by_hand_is_found_exactly_waived_and_cleared(lab, fleet_dirs, tmp_path):
    state_dir, out_dir = fleet_dirs
    # the fleet as after a clean deploy of group data: test_vllm.py's last roll put its flag change
    # back, so this changes nothing unless an earlier test left a host otherwise (then it converges
    # them all at once: the test's setup, not a roll under test)
    run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", "lab_containers",
        "--data", "vllm_max_unavailable=4", timeout=1800)
    for host, command, _ in DRIFT:
        lab_ssh(host, command)
    waivers = tmp_path / "waivers.yml"
    waivers.write_text("- {check: 'verify/test_limits.py::*', hosts: lab-c1, reason: 'nofile trial OPS-7', "
                       "expires: 2099-12-31}\n")
    link = state()["hosts"]["lab-c3"]["link"]
    subprocess.run(["ip", "link", "set", link, "down"], check=True)
    try:
        # two verify processes and two dry runs for the three hosts that answer: each host's problems
        # are told apart within a process, and the shards' plans are put together
        p = audit(state_dir, out_dir, "--limit", "lab_containers", "--waivers", str(waivers), "--workers", "2",
                  "--shards", "2")
    finally:
        subprocess.run(["ip", "link", "set", link, "up"], check=True)
    assert p.returncode == 1, p.stdout[-4000:]
    doc = latest_report(out_dir)
    assert set(doc["hosts"]) == {"lab-c1", "lab-c2", "lab-c3", NEW}
    live = {h: [x for x in d["problems"] if not x["waived"]] for h, d in doc["hosts"].items()}
    assert {h for h, ps in live.items() if ps} == {"lab-c1", "lab-c2", "lab-c3"}
    assert [x["kind"] for x in live["lab-c3"]] == ["unreachable"] and not doc["hosts"]["lab-c3"]["reachable"]
    for host, _, check in DRIFT:
        found = [x for x in doc["hosts"][host]["problems"] if x["check"].startswith(check)]
        assert found, (host, check, doc["hosts"][host]["problems"])
    waived = [x for x in doc["hosts"]["lab-c1"]["problems"] if x["waived"]]
    assert waived and all(x["check"].startswith("verify/test_limits.py::") for x in waived)
    assert waived[0]["waived"] == "nofile trial OPS-7 (until 2099-12-31)"
    assert any(x["kind"] == "config" and "limits" in x["check"] for x in live["lab-c1"])
    chrony = next(x for x in live["lab-c2"] if x["check"].startswith("verify/test_chrony.py::"))
    assert chrony["kind"] == "state" and "chrony service" in chrony["message"], chrony
    assert (chrony["expected"], chrony["actual"]) == ("active", "inactive"), chrony
    assert live[NEW] == [], live[NEW]
    assert (out_dir / sorted(x.name for x in out_dir.iterdir())[-1] / "junit.xml").is_file()
    # a deploy puts every host back (the two at once: harness.deploy_at_once); the next audit is
    # clean and says what was resolved
    deploy_at_once(("lab-c1", "lab-c2"))
    after = audit(state_dir, out_dir, "--limit", "lab_containers", "--workers", "2", "--shards", "2")
    # after a clean deploy the audit exits 0 and says so
    assert after.returncode == 0, after.stdout[-4000:]
    assert "4 hosts: 4 clean, 0 with drift, 0 unreachable" in " ".join(after.stdout.split())
    ch = latest_report(out_dir)["changes_since_last"]
    assert ch["new"] == []
    for host, _, check in DRIFT[1:]:
        assert any(r.startswith(f"{host} | ") and check.split("::")[0] in r for r in ch["resolved"]), (host, ch)
    assert any(r == "lab-c3 | unreachable | reachable" for r in ch["resolved"])


def test_an_audit_that_cannot_run_exits_2(lab, fleet_dirs, tmp_path):
    state_dir, out_dir = fleet_dirs
    p = run(str(BIN / "llmfleet"), "audit", "inventories/nope.py", check=False)
    assert p.returncode == 2 and "cannot read inventory inventories/nope.py" in p.stderr
    bad = tmp_path / "w.yml"
    bad.write_text("- {check: x, hosts: '*', reason: fine, expires: someday}\n")
    p = audit(state_dir, out_dir, "--waivers", str(bad))
    assert p.returncode == 2 and "waiver 1 (x): expires = 'someday'" in " ".join(p.stderr.split())
