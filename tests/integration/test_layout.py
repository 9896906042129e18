"""A serving layout on a lab host: lab-c4 (onboarded by test_fleet.py, serving
vllm.service) moves to two instances of the CPU build, each pinned to its own CPU through the unit's
own properties, behind its HAProxy front door on port 8000. Then: a flag change in a canary goes to
instance a first, which takes 25% then 50% of the front door's requests by its runtime weight and
is judged against instance b from the lab's Prometheus before b restarts, while the probe sends
requests through the front door (no failed request, never both instances down); kill -9 of one
instance (the front door stops sending to it, systemd brings it back, verify passes), bad layouts
and a held port refused before any change, and a second deploy that changes nothing. Stage
"grown": after the fleet tests, which add lab-c4."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path
from unittest import mock

import pytest
from harness import BIN, LAB_ENV, ROOT, api_key, env, lab_ssh, run, state

from llmfleet.lab import poller

HOST = "lab-c4"
pytestmark = pytest.mark.lab_stage("grown")
TWO = [{"name": "a", "gpus": [], "port": 8001, "cpus": "0"}, {"name": "b", "gpus": [], "port": 8002, "cpus": "1"}]
LAYOUT = "vllm_layout=" + json.dumps(TWO)
UNITS = ("vllm-a.service", "vllm-b.service")
# On the host, every 0.25 s: which instances answer /health (their own ports, which listen on the
# host only). Prints "<seconds> <a> <b>" a line, each the HTTP status, "down" (refused or cut: stopped
# or starting) or "slow" (no answer within 1 s: alive, on a machine this busy).
SAMPLER = ("python3 -u -c 'import socket, time, urllib.error, urllib.request\n"
           "t0 = time.monotonic()\n"
           "def up(port):\n"
           "    try:\n"
           "        return urllib.request.urlopen(f\"http://127.0.0.1:{port}/health\", timeout=1).status\n"
           "    except urllib.error.HTTPError as exc:\n"
           "        return exc.code\n"
           "    except urllib.error.URLError as exc:\n"
           "        return \"slow\" if isinstance(exc.reason, (socket.timeout, TimeoutError)) else \"down\"\n"
           "    except (socket.timeout, TimeoutError):\n"
           "        return \"slow\"\n"
           "    except OSError:\n"
           "        return \"down\"\n"
           "while time.monotonic() - t0 < 600:\n"
           "    print(round(time.monotonic() - t0, 2), up(8001), up(8002), flush=True)\n"
           "    time.sleep(0.25)\n'")


def deploy(*data: str, check: bool = True):
    args = [a for kv in (LAYOUT, *data) for a in ("--data", kv)]
    return run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", HOST, *args, check=check,
               timeout=1800)


def address() -> str:
    return state()["hosts"][HOST]["address"]


def pids() -> dict[str, str]:
    out = lab_ssh(HOST, "for u in " + " ".join(UNITS) + "; do systemctl show -p MainPID --value $u; done").stdout
    return dict(zip(UNITS, out.split(), strict=True))


def verify(lab, *data: str) -> subprocess.CompletedProcess:
    hosts = [h for h in lab.testinfra_hosts().split(",") if f"//{HOST}?" in h]
    return run(str(BIN / "pytest"), "verify/test_vllm.py", "verify/test_frontdoor.py", "-p", "no:cacheprovider", "-q",
               "-rf", f"--hosts={hosts[0]}", *[a for kv in (LAYOUT, *data) for a in ("--data", kv)], check=False)


@pytest.fixture(scope="module")
def laid_out(lab):
    """lab-c4 moved from vllm.service to the layout, with a client on the front door's port
    throughout (what it saw is printed for the closing note)."""
    assert HOST in state()["hosts"], "test_fleet.py adds lab-c4"
    before = lab_ssh(HOST, "systemctl is-active vllm.service", check=False).stdout.strip()
    with poller.Poller({HOST: address()}, api_key(), "tiny-llama", interval_s=0.5) as watch:
        started = time.monotonic()
        proc = deploy()
        took = time.monotonic() - started
        time.sleep(1.5)  # a request sent after the deploy ended (the last one may have left before)
    failed = [t for t, up in watch.timeline if not up]
    print(json.dumps({"move_to_layout_s": round(took, 1), "vllm_service_before": before,
                      "requests": len(watch.timeline), "failed": len(failed),
                      "longest_without_answer_s": watch.longest_below(1)}))
    out = " ".join((proc.stdout + proc.stderr).split())
    assert "vllm: moving to vllm_layout: vllm.service is stopped and removed" in out, out[-3000:]
    return watch


def test_a_host_moves_from_vllm_service_to_two_pinned_instances_behind_its_front_door(lab, laid_out, tmp_path):
    assert lab_ssh(HOST, "test ! -e /etc/systemd/system/vllm.service && ! systemctl is-active -q vllm.service",
                   check=False).returncode == 0, "vllm.service is left on the host"
    assert poller.complete(address(), api_key(), "tiny-llama") == 1
    assert laid_out.timeline[-1][1] == [HOST]  # served through the front door once the deploy ended
    proc = verify(lab)
    assert proc.returncode == 0, proc.stdout[-4000:]
    # the checks of each instance ran (not skipped): its CPUs, memory policy, and the front door's
    assert "passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], proc.stdout[-2000:]
    # the probe through the front door (as clients see the host) and each instance on its own route
    probe = run(str(BIN / "llmfleet"), "probe", "--inventory", "inventories/lab.py", "--limit", HOST, "--data",
                LAYOUT, "--instances", "--requests", "10", "--warmup", "0", "--out-dir", str(tmp_path), check=False,
                timeout=600)
    assert probe.returncode == 0, (probe.stdout + probe.stderr)[-3000:]
    reports = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert sorted(reports) == [f"{HOST}.a.json", f"{HOST}.b.json", f"{HOST}.json"], sorted(reports)
    for name, doc in reports.items():
        overall = doc["trials"][0]["overall"]
        assert (doc["passed"], overall["requests"], overall["failed"]) == (True, 10, 0), (name, overall)
    # an instance's share of the host's check rate (probe_check_rps 2: 1 req/s each)
    assert reports[f"{HOST}.a.json"]["trials"][0]["offered_rps"] == reports[f"{HOST}.json"]["trials"][0][
        "offered_rps"] / 2


@contextlib.contextmanager
def monitored_as_laid_out():
    """The lab's Prometheus scrapes lab-c4's instances (each through the front door's metrics port,
    labelled vllm_instance) as `llmfleet monitoring` renders them for a host with the layout, then
    what the inventory says again (the lab's group data has no layout)."""
    from llmfleet import monitoring
    from llmfleet.inventory import validated
    from llmfleet.lab import services
    from llmfleet.lab.config import LabPaths
    from llmfleet.lab.state import LabState
    from llmfleet.settings import validate

    def write(layout: list[dict] | None) -> None:
        with mock.patch.dict(os.environ, LAB_ENV), contextlib.chdir(ROOT):
            paths = LabPaths.from_env()
            found = [(h, validate(h["name"], h["data"] | {"vllm_layout": layout}) if h["name"] == HOST else s)
                     for h, s in validated("inventories/lab.py")]
            monitoring.write("inventories/lab.py", monitoring.hosts_from(found), services.prometheus_config_dir(paths))
            state = LabState.load(paths)
            assert state is not None
            services.reload(state.services["prometheus"])

    write(TWO)
    try:
        yield
    finally:
        write(None)


def test_a_flag_change_goes_to_one_instance_first_judged_against_the_other_while_the_probe_sees_no_failed_request(
        lab, laid_out, tmp_path):
    before = pids()
    sampler = subprocess.Popen([str(BIN / "llmfleet"), "lab", "ssh", HOST, "--", SAMPLER], cwd=ROOT, env=env(),
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    # the probe through the front door from before the roll to its end (SIGTERM: it sends no more,
    # lets those in flight finish, and reports on what it sent)
    probe = subprocess.Popen([str(BIN / "llmfleet"), "probe", "--inventory", "inventories/lab.py", "--limit", HOST,
                              "--duration", "900", "--warmup", "0", "--no-stop-early", "--out-dir", str(tmp_path)],
                             cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started = time.monotonic()
    try:
        with monitored_as_laid_out():
            time.sleep(3)
            proc = deploy('vllm_flags={"dtype": "float32", "max-model-len": 1024, "enforce-eager": true, '
                          '"max-num-seqs": 16}', "rollout_strategy=canary", "rollout_evidence_dir=reports/rollouts")
        rolled_s = time.monotonic() - started
    finally:
        probe.terminate()
        probe_out = probe.communicate(timeout=300)[0]
        sampler.terminate()
        samples = sampler.communicate(timeout=60)[0]
    out = " ".join((proc.stdout + proc.stderr).split())
    after = pids()
    assert all(after[u] != before[u] for u in UNITS), (before, after)  # each instance restarted
    for unit in UNITS:
        assert out.count(f"vllm: {unit}: ready in") == 1, out[-3000:]  # once
    # a first, at 24.8% then 50% of the front door's requests (weights 33% and 100% against b's
    # 100), judged against b on the lab's Prometheus; b restarted only after the verdict
    steps = re.findall(r"vllm: canary: step (\d) of 2: lab-c4/a take\(s\) ([0-9.]+)% of lab-c4's front door requests "
                       r"\(weight (\d+)%", out)
    assert steps == [("1", "24.8", "33"), ("2", "50.0", "100")], out[-4000:]
    assert "FAIL" not in out and len(re.findall(r"vllm: canary: step 2: pass [a-z0-9_]+: ", out)) == 8, out[-4000:]
    # and per class of the probe's mix, from the synthetic answers the front door says each instance gave
    assert re.search(r"vllm: canary: step 1: pass (requests|ttft_p95_ratio)\[[a-z_]+\]: class ", out), out[-4000:]
    passed = out.index("vllm: canary passed: a keep(s) what is staged, back at full weight")
    assert out.index("vllm: vllm-a.service: ready in") < passed < out.index("vllm: vllm-b.service: ready in"), \
        out[-4000:]
    evidence = json.loads(Path(re.search(r"evidence: (\S+\.json)\)", out[passed:]).group(1)).read_text())
    assert evidence["verdict"] == "passed" and evidence["cohort"] == ["lab-c4/a"] and \
        evidence["baseline"] == ["lab-c4/b"], evidence
    assert 'vllm_instance=~"b"' in evidence["steps"][0]["queries"]["baseline"]["ttft_p95_s"]
    assert all(s["cohort"]["requests"] >= 10 and s["baseline"]["requests"] >= 10 for s in evidence["steps"])
    # never both at once: at no sample were both instances down (not listening, or answering other
    # than 200); an answer slower than the sampler's 1 s is an instance alive on a busy machine
    rows = [line.split() for line in samples.splitlines() if len(line.split()) == 3]
    assert len(rows) > 100, samples[-1000:]

    def down(v: str) -> bool:
        return v not in ("200", "slow")

    both_down = [r[0] for r in rows if down(r[1]) and down(r[2])]
    each_down = {u: sum(1 for r in rows if down(r[i])) for i, u in ((1, "a"), (2, "b"))}
    slow = sum(1 for r in rows for v in r[1:] if v == "slow")
    assert not both_down and all(each_down.values()), (both_down, each_down, slow)
    doc = json.loads((tmp_path / f"{HOST}.json").read_text())
    assert doc["method"]["stopped"].startswith("by a signal"), probe_out[-3000:]
    overall = doc["trials"][0]["overall"]
    print(json.dumps({"roll_s": round(rolled_s, 1), "roll_probe_requests": overall["requests"],
                      "failed": overall["failed"], "samples_each_instance_down": each_down,
                      "samples_slow": slow}))
    # sent throughout the roll (probe_check_rps 2 in the lab) and none failed
    assert overall["requests"] >= 1.5 * rolled_s and overall["failed"] == 0, probe_out[-3000:]


def test_a_killed_instance_leaves_the_rotation_and_comes_back(lab, laid_out):
    pid = pids()["vllm-a.service"]
    with poller.Poller({HOST: address()}, api_key(), "tiny-llama", interval_s=0.25) as watch:
        time.sleep(2)
        killed_at = watch.timeline[-1][0]
        lab_ssh(HOST, f"sudo kill -9 {pid}")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            new = pids()["vllm-a.service"]
            ready = lab_ssh(HOST, "python3 -c 'import urllib.request; urllib.request.urlopen("
                                  "\"http://127.0.0.1:8001/health\", timeout=2)'", check=False).returncode == 0
            if new not in ("0", pid) and ready:
                break
            time.sleep(2)
        else:
            pytest.fail("vllm-a.service not back within 300 s after kill -9")
        time.sleep(6)  # back in the front door: rise 2 x inter 2000 ms
    # requests kept succeeding: at most those in flight when it died, none after the health
    # checks took it out (fall 3 x inter 2 s)
    failed = [t for t, up in watch.timeline if not up]
    late = [t for t in failed if t > killed_at + 3 * 2 + 1]
    print(json.dumps({"kill_requests": len(watch.timeline), "failed": failed}))
    assert len(watch.timeline) > 40 and len(failed) <= 2 and not late, watch.timeline
    restarts = lab_ssh(HOST, "systemctl show -p NRestarts --value vllm-a.service").stdout.strip()
    assert int(restarts) >= 1
    proc = verify(lab, 'vllm_flags={"dtype": "float32", "max-model-len": 1024, "enforce-eager": true, '
                       '"max-num-seqs": 16}')
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_bad_layouts_and_a_held_port_are_refused_before_any_change(lab, laid_out):
    before = pids()
    # every bad layout of a GPU host at once: the profile's GPUs, as a V100 box's data would say
    bad = json.dumps([{"name": "a", "gpus": [0, 5], "port": 8001}, {"name": "b", "gpus": [5, 9], "port": 9100},
                      {"name": "c", "gpus": [0, 4], "port": 8003}])
    proc = run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", HOST, "--data",
               f"vllm_layout={bad}", "--data", "gpu_profile=v100_sxm2_32gb_x8", check=False, timeout=600)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and "Starting operation" not in out, out[-3000:]
    for fragment in ("vllm_layout[0] (a).gpus = [0, 5]: not every pair of these GPUs is NVLink-connected",
                     "vllm_layout[1] (b).gpus = [5, 9]: GPU [9] beyond the 8 GPUs",
                     "vllm_layout[2] (c).gpus = [0, 4]: GPU 0 is instance a's too",
                     "spans NUMA nodes [0, 1]",
                     "port 9100 is taken twice on the host: by vllm_layout instance b and by "
                     "host_service_ports.node_exporter"):
        assert fragment in out, fragment
    # a port the layout is to take, held on the host by another process
    lab_ssh(HOST, "sudo systemd-run --unit=port-squatter python3 -m http.server 8003 --bind 127.0.0.1 && "
                  "for i in $(seq 50); do (echo > /dev/tcp/127.0.0.1/8003) 2>/dev/null && exit 0; sleep 0.2; done; "
                  "exit 1")
    try:
        three = json.dumps([*TWO, {"name": "c", "gpus": [], "port": 8003, "cpus": "1"}])
        proc = run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", HOST, "--data",
                   f"vllm_layout={three}", check=False, timeout=900)
        out = " ".join((proc.stdout + proc.stderr).split())
        assert proc.returncode == 1, out[-3000:]
        assert (f"host {HOST}: the port of vllm_layout instance c = 8003 is held on the host by python3") in out
        assert "port-squatter.service), not by vllm-c.service" in out, out[-3000:]
        assert lab_ssh(HOST, "test ! -e /etc/systemd/system/vllm-c.service", check=False).returncode == 0
    finally:
        lab_ssh(HOST, "sudo systemctl stop port-squatter", check=False)
    assert pids() == before


def test_a_second_deploy_of_the_layout_changes_nothing(lab, laid_out):
    flags = 'vllm_flags={"dtype": "float32", "max-model-len": 1024, "enforce-eager": true, "max-num-seqs": 16}'
    before = pids()
    proc = deploy(flags)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert "restart planned" not in out and ": ready in" not in out, out[-3000:]
    assert pids() == before
    plan = json.loads(run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "--dry", "--json", "--limit", HOST,
                          "--data", LAYOUT, "--data", flags).stdout)["plan"]
    changed = [p["name"] for p in plan if HOST in p["hosts_with_change"] + p["hosts_with_conditional_change"]]
    assert changed == [], changed
