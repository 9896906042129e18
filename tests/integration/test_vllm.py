"""vLLM serving for real on the lab's container hosts (the CPU build, the tiny model): rolling
restarts that keep N - max_unavailable hosts answering, bad input that stops before any restart
(flags the pinned vLLM's own parser or configuration refuses, one flag in two spellings), a
server that fails to start switched back, a killed server brought back by systemd, a second
deploy that restarts nothing, a package changed by hand in the environment (found, planned and
repaired) and a removed model link named as what differs (repaired in the same roll)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request

import pytest
from harness import BIN, GATEWAY, ROOT, api_key, lab_ssh, run, serving_containers, state
from harness import env as harness_env

from llmfleet import vllm
from llmfleet.lab import poller

REPORTS = ROOT / "reports"
UNIT = vllm.UNIT_PATH


def containers() -> dict[str, str]:
    return serving_containers()


def complete(address: str, key: str | None, max_tokens: int = 1) -> int | str:
    return poller.complete(address, key, "tiny-llama", max_tokens=max_tokens)


def main_pids() -> dict[str, str]:
    return {name: lab_ssh(name, "systemctl show -p MainPID --value vllm.service").stdout.strip()
            for name in containers()}


def deploy(*data: str, check: bool = True, limit: str = "lab_containers"):
    """A deploy of the container hosts (the VM does not serve, and every round trip to it is slow),
    or of the hosts `limit` names."""
    args = [a for kv in data for a in ("--data", kv)]
    return run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", limit, *args,
               check=check, timeout=1800)


def deploy_sharded(*data: str, check: bool = True):
    """The container hosts deployed by `llmfleet deploy`, a shard (a pyinfra --no-wait process) each:
    nothing but llmfleet/roll.py's slots keeps their roll to vllm_max_unavailable."""
    args = [a for kv in data for a in ("--data", kv)]
    return run(str(BIN / "llmfleet"), "deploy", "inventories/lab.py", "--limit", "lab_containers", "--shards", "3",
               "--out-dir", "reports/deploy", *args, check=check, timeout=1800)


@pytest.fixture(scope="module")
def serving(lab, deployed):
    """Every container host serving the group data's version (a deploy that changes nothing when
    the session's first deploy already did it; earlier tests may have recreated a host)."""
    deploy()
    return containers()


def test_every_container_host_serves_the_tiny_model(serving, deployed):
    key = api_key()
    for name, address in serving.items():
        assert complete(address, key, max_tokens=8) == 8, name
        assert complete(address, None) == "HTTP 401", f"{name}: /v1 answered without the API key"
    assert "[lab-vm1] vllm: skipped: vllm_enabled is False for this host" in " ".join(deployed.output.split())
    # the key never lands in the deploy's output, the unit, or a world-readable file
    assert key not in deployed.output
    for name in serving:
        leak = lab_ssh(name, f"grep -rl {key} /etc/systemd /var/log /tmp /home 2>/dev/null; "
                             "stat -c '%a %U' /etc/llmfleet/vllm/api-key.env", check=False)
        assert leak.stdout.split() == ["600", "root"], (name, leak.stdout)


# group_data/lab.py: steps of 25% and 50%, 15 s of warm-up, 15 s windows
CANARY = ("rollout_strategy=canary", "rollout_evidence_dir=reports/rollouts")


def evidence_of(out: str) -> dict:
    """The canary's evidence file the deploy named, read; its plot beside it."""
    path = re.findall(r"evidence: (\S+\.json)", out)[-1]
    doc = json.loads((ROOT / path).read_text())
    assert (ROOT / path).with_suffix(".png").stat().st_size > 1000, path
    return doc


def test_a_flag_change_goes_to_the_canary_first_is_promoted_in_batches_and_the_gateway_loses_no_request(serving):
    n = len(serving)
    before = main_pids()
    REPORTS.mkdir(exist_ok=True)
    # one completion per host per second, to each host itself: a client's view that leaves the 2 cores
    # to the servers; and an open-loop client of the fleet gateway (lab-gw1), 2 requests a second of 8
    # tokens each (the canary's inter-token latency gate has tokens to compare)
    gateway_at = state()["hosts"][GATEWAY]["address"]
    with poller.Poller(containers(), api_key(), "tiny-llama", interval_s=1.0) as watch, \
            poller.OpenLoop(gateway_at, api_key(), "tiny-llama", rate=2.0, max_tokens=8) as client:
        t0 = time.monotonic()
        # max_num_seqs: the underscore spelling, read as --max-num-seqs (the unit's arguments below;
        # the next test's deploy, in the dash spelling, finds the same unit and restarts nothing)
        proc = deploy('vllm_flags={"dtype": "float32", "max-model-len": 1024, "enforce-eager": true, '
                      '"max_num_seqs": 16}', *CANARY)
        deploy_s = round(time.monotonic() - t0, 1)
        time.sleep(2)
    after = main_pids()
    out = " ".join((proc.stdout + proc.stderr).split())
    (REPORTS / "vllm_roll_timeline.json").write_text(json.dumps(
        {"deploy_s": deploy_s, "longest_below_n_s": watch.longest_below(n), "timeline": watch.timeline,
         "gateway": {"sent": len(client.results), "failed": client.failed()}}))
    assert all(before[h] != after[h] for h in serving), (before, after)
    assert out.count("vllm: ready in") == n
    assert watch.fewest() >= n - 1, f"fewer than {n - 1} hosts answered at some moment: {watch.timeline}"
    assert len(watch.timeline) > 20 and watch.longest_below(n) > 0  # the poller did see the restarts
    # each host left the gateway's rotation before its restart and came back once ready: a client of
    # the gateway lost no request while each host, asked directly, did not answer for a while
    for name in serving:
        assert re.search(rf"\[{name}\] vllm: gateway: drained in [0-9.]+s", out), (name, out[-3000:])
        assert re.search(rf"\[{name}\] vllm: gateway: back in rotation in [0-9.]+s", out), (name, out[-3000:])
    assert len(client.results) >= 2 * deploy_s - 2, len(client.results)
    assert client.failed() == [], f"{len(client.failed())} of {len(client.results)} failed: {client.failed()[:10]}"
    for name in serving:
        args = lab_ssh(name, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value vllm.service)/cmdline").stdout
        assert "--max-num-seqs 16" in args, (name, args)
    # the canary: lab-c1 (the first serving host) alone first, at 25% then 50% of the gateway's requests,
    # judged on the clients' own traffic against lab-c2 and lab-c3; they rolled only on its pass
    # (a weight of 67% against two hosts at 100% is 25.1% of the requests, round-robin by weight)
    for step, (share, weight, asked) in enumerate(((25.1, 67, 25), (50.0, 200, 50)), 1):
        assert f"[lab-c1] vllm: canary: step {step} of 2: lab-c1 take(s) {share}% of the gateway's requests " \
               f"(weight {weight}%, asked {asked}%)" in out, out[-4000:]
    assert out.count("on the fleet's own traffic") == 2 and "FAIL" not in out, out[-4000:]
    verdict = out.index("[lab-c1] vllm: canary: step 2: pass kv_cache_peak_increase")  # the last gate's line
    assert "[lab-c1] vllm: canary passed: lab-c1 keeps what is staged, back at full weight" in out
    for name in ("lab-c2", "lab-c3"):
        assert out.index(f"[{name}] vllm: canary: waiting for the verdict") < verdict < \
            out.index(f"[{name}] vllm: restarting:"), name
    doc = evidence_of(out)
    assert doc["verdict"] == "passed" and doc["cohort"] == ["lab-c1"] and doc["baseline"] == ["lab-c2", "lab-c3"]
    assert [s["synthetic"] for s in doc["steps"]] == [None, None]
    for s in doc["steps"]:
        assert s["passed"] and s["cohort"]["requests"] >= 10 and s["baseline"]["requests"] >= 10, s
        assert s["cohort"]["ttft_p95_s"] > 0 and s["baseline"]["e2e_p95_s"] > 0 and s["cohort"]["itl_p95_s"] > 0, s


def test_a_second_deploy_restarts_nothing(serving):
    # the dash spelling of the flags the roll above gave as max_num_seqs: the same unit
    data = 'vllm_flags={"dtype": "float32", "max-model-len": 1024, "enforce-eager": true, "max-num-seqs": 16}'
    before = main_pids()
    plan = run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "--dry", "--json", "--limit", "lab_containers",
               "--data", data)
    changed = [p for p in json.loads(plan.stdout)["plan"] if p["hosts_with_change"] or
               p["hosts_with_conditional_change"]]
    assert changed == [], changed
    proc = deploy(data)
    assert "vllm: restart" not in proc.stdout + proc.stderr
    assert main_pids() == before


def test_a_regressed_change_is_stopped_at_the_canary_on_synthetic_load_and_rolled_back_without_a_failed_request(
        serving):
    """max-num-seqs 1 and max-num-batched-tokens 1: lab-c1 schedules one token a step, so a prompt
    is prefilled a token at a time and requests wait for each other: its first tokens come late
    (the regression: 13 and 60 x the baseline's P95 TTFT in two runs of benchmarks/canary_roll.py;
    4 tokens a step gave 2.8 to 5 x, too close to the lab's gate of 2.5 to fail every time), while
    health and a 1-token completion pass. No client sends anything until the verdict: the fleet is
    idle, so the canary's window gets the group's probe mix as synthetic load. Once the canary
    fails, an open-loop client of the gateway watches the switch-back."""
    before = main_pids()
    data = ['vllm_flags={"dtype": "float32", "max-model-len": 1024, "enforce-eager": true, "max-num-seqs": 1, '
            '"max-num-batched-tokens": 1}', *CANARY]
    args = [str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", "lab_containers",
            *[a for kv in data for a in ("--data", kv)]]
    lines: list[str] = []
    client = poller.OpenLoop(state()["hosts"][GATEWAY]["address"], api_key(), "tiny-llama", rate=2.0)
    with subprocess.Popen(args, cwd=ROOT, env=harness_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "vllm: canary: step 1: FAIL" in line and not client.started():
                client.start()
        code = proc.wait(timeout=900)
    time.sleep(2)
    client.stop()
    out = " ".join("".join(lines).split())
    after = main_pids()
    assert code != 0, out[-3000:]
    assert "[lab-c1] vllm: canary: step 1 of 2: lab-c1 take(s) 25.1% of the gateway's requests" in out, out[-4000:]
    assert "with synthetic load (the fleet finished" in out, out[-4000:]
    failed = re.search(r"\[lab-c1\] vllm: canary failed: at step 1 \(25\.1% of the requests\): (.*?); "
                       r"stopping the roll", out)
    assert failed, out[-4000:]
    # the gate, both sides' values and the evidence file are named
    gate = (r"FAIL (ttft|e2e)_p95_ratio: P95 [a-z -]+\(s\): cohort [0-9.e+-]+, baseline [0-9.e+-]+ \(ratio [0-9.e+-]+, "
            r"at most (2\.5|3); slower by [0-9.e+-]+ s, floor [0-9.]+ s\)")
    assert re.search(gate, failed.group(1)), failed.group(1)
    # and per class of the probe's mix, from the synthetic answers lab-gw1 says lab-c1 gave
    assert re.search(r"FAIL (ttft|e2e)_p95_ratio\[[a-z_]+\]: class [a-z_]+: .*Mann-Whitney p = ", failed.group(1)), \
        failed.group(1)
    assert "switched back to the previous version, which is serving again" in out, out[-3000:]
    doc = evidence_of(failed.group(1))
    assert doc["verdict"] == "failed" and len(doc["steps"]) == 1 and not doc["steps"][0]["passed"]
    synthetic = doc["steps"][0]["synthetic"]
    assert synthetic["requests"] >= 200 and synthetic["failed"] == 0, synthetic  # 8 req/s over 15 s + 15 s
    # lab-c2 and lab-c3 never restarted; lab-c1 serves the flags it had again
    for name in ("lab-c2", "lab-c3"):
        assert after[name] == before[name] and \
            f"[{name}] vllm: not restarted: the roll stopped after the canary failed: at step 1" in out, name
    args_c1 = lab_ssh("lab-c1", "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value vllm.service)/cmdline").stdout
    assert "--max-num-seqs 16" in args_c1 and after["lab-c1"] != before["lab-c1"], args_c1
    # the switch-back lost no request of a client sending through the gateway
    assert len(client.results) >= 10, client.results
    assert client.failed() == [], f"{len(client.failed())} of {len(client.results)} failed: {client.failed()[:10]}"


@pytest.mark.parametrize("data,message", [
    ('vllm_flags={"dtype": "float32", "max-model-len": 1024, "scheduler-policy": "fcfs"}',
     "vllm_flags.scheduler-policy: not an option of vLLM 0.32.0 (fix: the option is --scheduling-policy"),
    ('vllm_flags={"dtype": "float32", "max-model-len": 1024, "max-waiting-time": 5}',
     "vllm_flags.max-waiting-time: not an option of vLLM 0.32.0 (fix: no vLLM version has it"),
    ('vllm_flags={"dtype": "float32", "max-model-len": 1024, "max-num-seqz": 16}',
     "vllm_flags.max-num-seqz: vLLM 0.32.0 installed on the host has no --max-num-seqz (fix: did you mean "
     "--max-num-seqs?)"),
    # a value out of the option's range (llmfleet/compat.py OPTION_RULES): refused before any host
    ('vllm_flags={"dtype": "float32", "max-model-len": "lots"}',
     "vllm_flags.max-model-len = 'lots': vLLM 0.32.0 takes a whole number >= 1, or -1, 'auto', a size like '32k'"),
    # a value the table has no rule for: the installed vLLM's own parser refuses it
    ('vllm_flags={"dtype": "float32", "max-model-len": 1024, "seed": "lots"}',
     "vllm_flags: vLLM 0.32.0 refuses the arguments: argument --seed"),
])
def test_a_bad_flag_stops_before_any_restart(serving, data, message):
    before = main_pids()
    proc = deploy(data, check=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 1 and message in out, out[-3000:]
    assert "vllm: ready in" not in out
    assert main_pids() == before


def test_llmfleet_layout_reads_the_underscore_spelling(lab):
    proc = run(str(BIN / "llmfleet"), "layout", "inventories/lab.py", "--limit", "lab_containers", "--data",
               'vllm_flags={"dtype": "float32", "max-model-len": 1024, "tensor_parallel_size": 2}')
    out = " ".join(proc.stdout.split())
    for name in containers():
        assert f"{name}: no layout: vllm.service on port 8000, all 0 GPUs, tensor-parallel size 2" in out, out


@pytest.mark.parametrize("data,message", [
    # one option in two spellings (even with one value): the settings refuse it, before any host is touched
    ('vllm_flags={"dtype": "float32", "max_model_len": 1024, "max-model-len": 1024, "enforce-eager": true}',
     "vllm_flags.max-model-len: given twice, as 'max_model_len' = 1024 and 'max-model-len' = 1024: "
     "vLLM reads each as --max-model-len, and the one last on its command line wins (fix: keep one, spelt "
     "'max-model-len')"),
    # a batch token budget below the context length with chunked prefill off: the parser takes it, vLLM
    # 0.32.0's SchedulerConfig refuses it when the server builds its configuration at start
    # (vllm/config/scheduler.py, verify_max_model_len): the host's vLLM builds it before any restart
    ('vllm_flags={"dtype": "float32", "max-model-len": 1024, "enforce-eager": true, "max-num-batched-tokens": 512, '
     '"enable-chunked-prefill": false}',
     "vllm_flags: vLLM 0.32.0 refuses these flags at start: max_num_batched_tokens (512) is smaller than "
     "max_model_len (1024). This effectively limits the maximum sequence length to max_num_batched_tokens and "
     "makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len. "
     "(fix: change max-model-len = 1024, max-num-batched-tokens = 512 in vllm_flags as vLLM's reason says); "
     "the running service is left as it is"),
], ids=["two_spellings", "vllm_config_refuses"])
def test_flags_vllm_would_refuse_at_start_stop_every_host_before_any_operation(serving, data, message):
    before = main_pids()
    proc = deploy(data, check=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 1 and any(f"host {name}: {message}" in out for name in serving), out[-3000:]
    assert "--> Starting operation" not in out and "vllm: ready in" not in out, out[-3000:]
    assert main_pids() == before


def test_a_port_held_by_another_process_stops_the_host_before_any_change(serving):
    name = next(iter(serving))
    lab_ssh(name, "sudo systemd-run --quiet --unit=port-squatter python3 -m http.server 8123 && for i in $(seq 50); "
                  "do (echo > /dev/tcp/127.0.0.1/8123) 2>/dev/null && exit 0; sleep 0.2; done; exit 1")
    try:
        before = main_pids()
        unit = lab_ssh(name, f"sha256sum {UNIT}").stdout
        squatter = lab_ssh(name, "systemctl show -p MainPID --value port-squatter").stdout.strip()
        proc = deploy("vllm_port=8123", check=False, limit=name)
        out = " ".join((proc.stdout + proc.stderr).split())
        assert proc.returncode == 1, out[-3000:]
        assert (f"host {name}: vllm_port = 8123 is held on the host by python3 (pid {squatter}, unit "
                "port-squatter.service), not by vllm.service") in out, out[-3000:]
        assert "vllm: restart on what is staged" not in out and "vllm: unit" not in out
        assert main_pids() == before and lab_ssh(name, f"sha256sum {UNIT}").stdout == unit
    finally:
        lab_ssh(name, "sudo systemctl stop port-squatter", check=False)


def test_a_broken_model_checksum_stops_before_any_host_is_touched(serving, tmp_path):
    before = main_pids()
    bad_pin = run(str(BIN / "python"), "-c", "import json,runpy; print(json.dumps(runpy.run_path("
                  "'group_data/lab.py')['vllm_model'] | {'version': '2', 'sha256': '0' * 64}))").stdout.strip()
    proc = deploy(f"vllm_model={bad_pin}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "vllm_model.sha256 = '" + "0" * 64 + "'" in out, out[-3000:]
    assert "--> Starting operation" not in out
    # a damaged file in the source folder: refused on this machine too, before any host
    src = json.loads(bad_pin)["source"].removeprefix("file://")
    damaged = tmp_path / "model"
    run("cp", "-a", src, str(damaged))
    (damaged / "config.json").write_text((damaged / "config.json").read_text().replace("silu", "gelu"))
    model = json.loads(bad_pin) | {"source": f"file://{damaged}", "sha256": run(
        "sh", "-c", f"sha256sum {damaged}/SHA256SUMS | cut -d' ' -f1").stdout.strip()}
    proc = deploy(f"vllm_model={json.dumps(model)}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "config.json does not match its SHA256SUMS entry" in out, out[-3000:]
    assert main_pids() == before


# A unit environment no host checked before this session (LLMFLEET_TEST_RUN), and whether a test
# here had the hosts check it: each host keeps the flag check's answers that passed, for the same
# inputs (vLLM's packages, arguments, environment, model config), and reuses them.
TEST_RUN = str(time.time_ns())
CHECKED_ENVS: set[str] = set()


@pytest.mark.parametrize("how", [deploy, deploy_sharded], ids=["in_step", "sharded"])
def test_a_server_that_fails_to_start_is_switched_back_and_stops_the_roll(serving, how):
    before = main_pids()
    key = api_key()
    # a KV cache of 0 GiB: vLLM's configuration takes it (the flag check builds it before the
    # restart), the engine refuses it after loading the weights ("No available memory for the cache
    # blocks": vLLM 0.32.0 vllm/v1/core/kv_cache_utils.py, _check_enough_kv_cache_memory). A
    # context longer than the model's positions no longer reaches a restart: vLLM's ModelConfig
    # refuses it when the check builds the configuration.
    env = run(str(BIN / "python"), "-c", "import json,runpy; print(json.dumps(runpy.run_path("
              "'group_data/lab.py')['vllm_env'] | {'VLLM_CPU_KVCACHE_SPACE': '0', "
              f"'LLMFLEET_TEST_RUN': '{TEST_RUN}'}}))").stdout.strip()
    proc = how(f"vllm_env={env}", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    # (llmfleet deploy prints its shards' lines wrapped to the terminal's width: read as one line)
    flat = " ".join(out.split())
    assert "vllm.service exited while starting" in flat and "switched back to the previous version, which is " \
        "serving again" in flat, out[-4000:]
    # the flag check: afresh for an environment the hosts never checked; the second time, the host
    # that checked it for all (one pyinfra run shares one host's answer) reuses the answer it kept
    reused = {name for name in serving
              if re.search(rf"\[{name}\] vllm: flags: passed vLLM [0-9.]+'s check at \S+, reused", flat)}
    assert (len(reused) >= 1) if env in CHECKED_ENVS else (reused == set()), (reused, out[-4000:])
    CHECKED_ENVS.add(env)
    for name in serving:  # root's only
        assert lab_ssh(name, f"sudo stat -c '%a %U' {vllm.FLAG_ANSWERS_DIR}").stdout.split() == ["700", "root"]
    assert flat.count("not restarted: the roll stopped after") == len(serving) - 1, out[-4000:]
    after = main_pids()
    assert sum(before[h] != after[h] for h in serving) == 1, (before, after)  # only the first host restarted
    for name, address in serving.items():
        assert complete(address, key) == 1, f"{name} does not serve after the stopped roll"


def test_a_killed_server_is_brought_back_by_systemd(lab, serving):
    name, address = next(iter(serving.items()))
    pid = main_pids()[name]
    lab_ssh(name, f"sudo kill -9 {pid}")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        new = main_pids()[name]
        if new not in ("0", pid) and complete(address, api_key()) == 1:
            break
        time.sleep(2)
    else:
        pytest.fail(f"{name}: vLLM not back within 300 s after kill -9")
    restarts = lab_ssh(name, "systemctl show -p NRestarts --value vllm.service").stdout.strip()
    assert int(restarts) >= 1
    proc = verify_vllm(lab, [name])
    assert proc.returncode == 0, proc.stdout[-3000:]


FLAGS = 'vllm_flags={"dtype": "float32", "max-model-len": 1024, "enforce-eager": true, "max-num-seqs": 16}'


def planned(*data: str) -> dict[str, list[str]]:
    """The names of the operations the deploy's dry run would change, per container host (what the
    audit's config drift lists)."""
    args = [a for kv in data for a in ("--data", kv)]
    plan = json.loads(run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "--dry", "--json", "--limit",
                          "lab_containers", *args).stdout)["plan"]
    return {name: [p["name"] for p in plan if name in p["hosts_with_change"] + p["hosts_with_conditional_change"]]
            for name in containers()}


def verify_vllm(lab, names: list[str], *args: str, data: tuple[str, ...] = (FLAGS,)):
    return run(str(BIN / "pytest"), "verify/test_vllm.py", "-p", "no:cacheprovider", "-q", *args,
               "--hosts=" + ",".join(h for h in lab.testinfra_hosts().split(",")
                                     if any(f"//{name}?" in h for name in names)),
               *[a for kv in data for a in ("--data", kv)], check=False)


def test_a_changed_package_and_a_removed_model_link_are_planned_as_what_differs_and_one_deploy_repairs_both(
        lab, serving):
    """Two repairs, each on a host of its own, in one roll (both hosts in one batch): a package
    changed by hand in the vLLM environment (verify names it; the plan puts the recorded versions
    back) and a removed model link (the plan names the link: not "the unit changed", and no check
    that changes nothing). The third host has nothing to repair."""
    pkg_host, link_host = list(serving)[0], list(serving)[-1]
    deploy(FLAGS)  # every host on the version the earlier tests left (a stopped roll leaves some behind)
    env = lab_ssh(pkg_host, "readlink -f /opt/llmfleet/vllm/current").stdout.strip()
    record = json.loads(lab_ssh(pkg_host, f"cat {env}/.llmfleet-packages.json").stdout)["packages"]
    removed, downgraded = [n for n in ("certifi", "idna", "six", "filelock", "packaging") if n in record][:2]
    lab_ssh(pkg_host, f"sudo {env}/bin/python3 -m pip uninstall -y -q {removed} && sudo sed -i 's/^Version: .*/"
                      f"Version: 0.0.1/' {env}/lib/python3*/site-packages/{downgraded}-*.dist-info/METADATA")
    args = lab_ssh(link_host, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value vllm.service)/cmdline").stdout
    link = args.split("--model ", 1)[1].split()[0]
    target = lab_ssh(link_host, f"readlink {link}").stdout.strip()
    lab_ssh(link_host, f"sudo rm {link}")

    proc = verify_vllm(lab, [pkg_host], "-k", "environment_holds")
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 1, out[-3000:]
    assert f"{removed}: expected {record[removed]}, actual not installed" in out, out[-3000:]
    assert f"{downgraded}: expected {record[downgraded]}, actual 0.0.1" in out, out[-3000:]
    env_id = env.rsplit("/", 1)[-1]
    restart = ("vllm | vllm: restart on what is staged, in batches of vllm_max_unavailable, each ready before the next "
               "(a canary's cohort first, the others on its verdict)")
    assert planned(FLAGS) == {
        pkg_host: [f"vllm | vLLM environment {env_id}: packages differ from its record: the recorded versions put back",
                   restart],
        link_host: ["vllm | vllm: model link `current` missing or not at vllm_model's version: staged for the restart",
                    restart],
        **{n: [] for n in serving if n not in (pkg_host, link_host)}}

    # the repairing deploy is also this module's way back to group data (the flags the flag roll
    # changed), which the modules after it expect: one roll, all hosts at once, instead of a
    # second roll of every host later
    proc = deploy(f"vllm_max_unavailable={len(serving)}")
    out = proc.stdout + proc.stderr
    assert out.count("vllm: ready in") == len(serving), out[-3000:]
    assert f"differs from its record: {removed}: expected {record[removed]}, actual not installed" in out
    assert f"the model link {link} is missing" in out, out[-3000:]
    assert lab_ssh(link_host, f"readlink {link}").stdout.strip() == target
    assert planned() == {n: [] for n in serving}
    proc = verify_vllm(lab, list(serving), data=())
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_monitoring_hand_off_matches_the_lab(serving, tmp_path):
    import yaml

    run(str(BIN / "llmfleet"), "monitoring", "--inventory", "inventories/lab.py", "--out", str(tmp_path))
    targets = yaml.safe_load((tmp_path / "vllm-targets.yml").read_text())
    assert {t["labels"]["host"]: t["targets"] for t in targets} == {n: [f"{a}:8000"] for n, a in serving.items()}
    rules = (tmp_path / "vllm-alerts.yml").read_text()
    address = next(iter(serving.values()))
    with urllib.request.urlopen(f"http://{address}:8000/metrics", timeout=10) as r:
        exported = r.read().decode()
    used = set(re.findall(r"\b((?:vllm:)?[a-z0-9_]+(?:_total|_perc|_waiting|_seconds))(?:_bucket)?\{", rules))
    assert used and all(name in exported for name in used), (used, "missing from /metrics")
