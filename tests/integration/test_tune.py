"""`llmfleet tune` on a lab host: lab-c4, which test_layout.py left serving two pinned instances
behind its front door, searches a small space (two batching flags, two layouts: the two instances
each on a CPU, or one on both) with the real vLLM's CPU build. A candidate the host's vLLM refuses at start
(fewer batched tokens than sequences) is recorded as failed with vLLM's reason while the search
goes on; the search, stopped by SIGTERM, resumes from its journal without measuring anything again;
it ends with a winner and its snippet or says the current configuration is best; the host was held
out of the fleet gateway's rotation throughout and ends in its configured state, back in rotation;
the winner, applied, is confirmed by an independent probe within the reported interval and by
`llmfleet tune --confirm`. Stage "grown": after test_layout.py."""

from __future__ import annotations

import ast
import json
import re
import signal
import subprocess
import time

import pytest
from harness import BIN, ROOT, env, lab_ssh, run, state

HOST = "lab-c4"
pytestmark = pytest.mark.lab_stage("grown")
TWO = [{"name": "a", "gpus": [], "port": 8001, "cpus": "0"}, {"name": "b", "gpus": [], "port": 8002, "cpus": "1"}]
ONE = [{"name": "a", "gpus": [], "port": 8001, "cpus": "0-1"}]  # one instance on both CPUs (a TP4 against two TP2s)
# the flags test_layout.py leaves lab-c4 on (its configured state here: nothing to restart first)
FLAGS = {"dtype": "float32", "max-model-len": 1024, "enforce-eager": True, "max-num-seqs": 16}
# max-num-batched-tokens 4 with max-num-seqs 8 or 16: vLLM 0.32.0 refuses it at start
# (vllm/config/scheduler.py: max_num_batched_tokens must be >= max_num_seqs), a candidate that
# cannot start
SPACE = {"flags": {"max-num-batched-tokens": [None, 4], "max-num-seqs": [8, 16]}, "layouts": [TWO, ONE]}
# short probe trials: the lab's tiny model carries tens of requests a second; a search from 32 req/s
PROBE = ["probe_duration_s=4", "probe_warmup_s=2", "probe_repeats=1", "probe_min_requests=5",
         "probe_search_precision=0.3", "probe_search_start_rps=32"]
DATA = ["vllm_flags=" + json.dumps(FLAGS), "vllm_layout=" + json.dumps(TWO), "tune_space=" + json.dumps(SPACE), *PROBE,
        "tune_top=1", "tune_repeats=1"]
START = "max-num-batched-tokens default, max-num-seqs 16; layout a CPUs 0 + b CPUs 1"
REFUSED = "max-num-batched-tokens 4, max-num-seqs 16; layout a CPUs 0 + b CPUs 1"
AGENT = "/var/lib/llmfleet/gateway-agent"


def tune_args(out_dir, *data: str) -> list[str]:
    return [str(BIN / "llmfleet"), "tune", "inventories/lab.py", "--limit", HOST, "--out-dir", str(out_dir),
            *[a for kv in (*DATA, *data) for a in ("--data", kv)]]


def agent_state() -> str:
    """What the host's gateway agent answers, and whether a hold keeps it so: e.g. "drain held"."""
    return " ".join(lab_ssh(HOST, f"cat {AGENT}/state; test -e {AGENT}/hold && echo held || echo free").stdout.split())


def interrupted_run(out_dir) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The tune stopped by SIGTERM while it deploys the candidate vLLM refuses (its third trial):
    that trial ends and is kept, the next is not begun; what the host's agent said meanwhile."""
    proc = subprocess.Popen(tune_args(out_dir), cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines, held = [], []
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        if line.startswith(f"{HOST}: deploying max-num-batched-tokens 4"):
            held.append(agent_state())
            proc.send_signal(signal.SIGTERM)
    out = proc.stdout.read() if proc.stdout else ""
    proc.wait(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(lines)), held


def test_a_tune_records_a_refused_candidate_resumes_after_sigterm_and_its_winner_holds_on_an_independent_probe(
        lab, tmp_path):
    assert HOST in state()["hosts"], "test_fleet.py adds lab-c4"
    out_dir = tmp_path / "tune"
    started = time.monotonic()
    first, held = interrupted_run(out_dir)
    first_s = time.monotonic() - started
    said = " ".join(first.stderr.split())
    assert first.returncode == 1, said[-3000:]
    assert f"{HOST}: held out of the fleet gateway's rotation" in said, said[-3000:]
    assert held == ["drain held"], held  # while it tuned: drained at the gateway, and held so
    assert "the tune was stopped by a signal after 2 trial(s)" in said and "the same command resumes" in said, said
    journal = [json.loads(line) for line in (out_dir / f"{HOST}.journal.jsonl").read_text().splitlines()]
    assert [(t["candidate"], t["status"]) for t in journal] == [(START, "measured"), (REFUSED, "failed")], journal
    assert "max_num_batched_tokens (4) must be greater than or equal to max_num_seqs (16)" in journal[1]["reason"]
    assert journal[1]["starts"] == 0  # refused before any restart: the instances kept serving
    assert agent_state() == "ready 100% free"  # stopped: back in rotation, the hold released

    started = time.monotonic()
    second = run(*tune_args(out_dir), check=False, timeout=1800)
    second_s = time.monotonic() - started
    print("\n".join(ln for ln in second.stderr.splitlines() if not ln.startswith("  ")))  # the tune's own lines
    said = " ".join(second.stderr.split())
    assert second.returncode == 0, said[-4000:] + second.stdout[-2000:]
    assert f"{HOST}: resuming: 2 trial(s)" in said, said[-3000:]
    # nothing the first run measured is measured or deployed again (the start only as a top candidate)
    assert not re.search(rf"measuring {re.escape(START)}(?! again)", said), said[-4000:]
    assert f"deploying {REFUSED}" not in said
    doc = json.loads((out_dir / f"{HOST}.json").read_text())
    print(json.dumps({"first_run_s": round(first_s, 1), "second_run_s": round(second_s, 1), "starts": doc["starts"],
                      "grid": doc["grid_size"], "deploys_s": doc["deploys_s"], "statement": doc["statement"],
                      "trials": [(t["candidate"], t["status"], t["effective_rps"], t["repeats"])
                                 for t in doc["trials"]]}))
    assert doc["starts"] < doc["grid_size"] == 8
    assert {t["candidate"] for t in doc["trials"]} >= {START, REFUSED}
    assert (out_dir / f"{HOST}.png").stat().st_size > 10_000
    winner = doc["winner"]
    assert winner and len(winner["measurements"]) == 2 and winner["half_width_95"] > 0, winner
    assert doc["provenance"]["host"] == HOST and doc["provenance"]["vllm"] == "0.32.0", doc["provenance"]
    assert doc["statement"] in second.stdout.replace("\n", " ") or doc["statement"][:60] in " ".join(
        second.stdout.split()), second.stdout[-2000:]
    applied = [f"vllm_flags={json.dumps(winner['vllm_flags'])}", f"vllm_layout={json.dumps(winner['vllm_layout'])}"]
    if doc["current_is_best"]:
        assert "is already the best found" in doc["statement"] and not (out_dir / f"{HOST}.snippet.py").exists()
    else:
        snippet: dict = {}
        exec(compile(ast.parse((out_dir / f"{HOST}.snippet.py").read_text()), "snippet", "exec"), {}, snippet)  # noqa: S102
        assert snippet["vllm_flags"] == winner["vllm_flags"] and snippet["vllm_layout"] == winner["vllm_layout"]
    # the host ends as configured (the two instances), serving, back in the gateway's rotation
    assert agent_state() == "ready 100% free"
    assert lab_ssh(HOST, "systemctl is-active vllm-a.service vllm-b.service", check=False).returncode == 0

    # the winner applied (a no-op where it is the current configuration), then measured on its own
    run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "-y", "--limit", HOST,
        *[a for kv in applied for a in ("--data", kv)], timeout=1800)
    probe = run(str(BIN / "llmfleet"), "probe", "--inventory", "inventories/lab.py", "--limit", HOST, "--search",
                "--out-dir", str(tmp_path / "probe"), *[a for kv in (*applied, *PROBE) for a in ("--data", kv)],
                check=False, timeout=900)
    # the independent search's answer, [effective, lowest failing), meets the reported interval
    found = json.loads((tmp_path / "probe" / f"{HOST}.json").read_text())["effective"]
    low, high = winner["effective_rps_mean"] - winner["half_width_95"], winner["effective_rps_mean"] + winner[
        "half_width_95"]
    print(json.dumps({"independent": [found["rps"], found["lowest_failing_rps"]], "reported": [low, high]}))
    assert probe.returncode == 0 and found["rps"] is not None, probe.stderr[-2000:]
    assert found["rps"] <= high and (found["lowest_failing_rps"] or float("inf")) >= low, (found, low, high)
    confirm = run(str(BIN / "llmfleet"), "tune", "inventories/lab.py", "--limit", HOST, "--confirm",
                  str(out_dir / f"{HOST}.json"), *[a for kv in (*applied, *PROBE) for a in ("--data", kv)],
                  check=False, timeout=600)
    assert confirm.returncode == 0 and "confirmed on 1 of 1 host(s)" in confirm.stdout, confirm.stdout[-2000:]
